#include "cli/model_runner.h"

#include <spdlog/spdlog.h>

#include "base/error.h"
#include "parallel/mpi_world.h"
#include "parallel/thread_parallel.h"

namespace mlaserve {
namespace {

class SingleRunner : public SequenceRunner {
 public:
  SingleRunner(const DeepseekV3Model& model, int64_t capacity) : model_(model), cache_(model.config(), capacity) {}
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits, MlaPath path) override {
    model_.forward(tokens, start, cache_.view(), all_logits, logits, path);
  }

 private:
  const DeepseekV3Model& model_;
  SequenceCache cache_;
};

class ThreadRunner : public SequenceRunner {
 public:
  ThreadRunner(const DeepseekV3Model& model, const ParallelOptions& options, int64_t capacity)
      : ranks_(model, options), sequence_(ranks_.new_sequence(capacity)) {}
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits, MlaPath path) override {
    ranks_.forward(*sequence_, tokens, start, all_logits, logits, path);
  }
  double collective_seconds() const override { return ranks_.collective_seconds(0); }
  int ranks() const override { return ranks_.size(); }

 private:
  ThreadParallelModel ranks_;
  std::unique_ptr<ThreadParallelModel::Sequence> sequence_;
};

// Under mpirun every process runs the same command on its own shard and latent cache; the
// all-gathered logits are identical everywhere, so every rank samples the same tokens.
class MpiRunner : public SequenceRunner {
 public:
  MpiRunner(const DeepseekV3Model& model, const ParallelFlags& flags, int64_t capacity)
      : comm_(make_mpi_communicator()), cache_(model.config(), capacity) {
    MLA_CHECK(flags.tp == 1 || flags.tp == comm_->size(),
              "--tp {} does not match the MPI world size {} (mpirun -np)", flags.tp, comm_->size());
    shard_ = model.shard({comm_->rank(), comm_->size(), flags.ep}, comm_.get());
    if (comm_->rank() == 0)
      spdlog::info("{} MPI ranks, {} parallel MoE, {} heads per rank", comm_->size(), flags.ep ? "expert" : "tensor",
                   model.config().num_attention_heads / comm_->size());
  }
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits, MlaPath path) override {
    shard_->forward(tokens, start, cache_.view(), all_logits, logits, path);
  }
  bool writes_output() const override { return comm_->rank() == 0; }
  double collective_seconds() const override { return comm_->collective_seconds(); }
  int ranks() const override { return comm_->size(); }

 private:
  std::unique_ptr<Communicator> comm_;
  SequenceCache cache_;
  std::unique_ptr<DeepseekV3Model> shard_;
};

}  // namespace

void add_parallel_flags(CLI::App* cmd, ParallelFlags& flags) {
  cmd->add_option("--tp", flags.tp, "ranks (threads) the model is split over: heads, MLP columns, vocab")->capture_default_str();
  cmd->add_flag("--ep", flags.ep, "split the MoE experts over the ranks (expert parallelism) instead of their columns");
  cmd->add_option("--comm-timeout", flags.comm_timeout_s, "seconds a rank waits in a collective before failing")->capture_default_str();
}

std::unique_ptr<SequenceRunner> SequenceRunner::create(const DeepseekV3Model& model, const ParallelFlags& flags,
                                                       int64_t capacity) {
  MLA_CHECK(flags.tp >= 1, "--tp must be at least 1");
  if (launched_by_mpi()) return std::make_unique<MpiRunner>(model, flags, capacity);
  if (flags.tp == 1) return std::make_unique<SingleRunner>(model, capacity);
  ParallelOptions options;
  options.size = flags.tp;
  options.expert_parallel = flags.ep;
  options.collective_timeout = std::chrono::milliseconds(int64_t(flags.comm_timeout_s * 1000));
  return std::make_unique<ThreadRunner>(model, options, capacity);
}

}  // namespace mlaserve
