#include "cli/model_runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/numa.h"
#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "parallel/mpi_world.h"
#include "parallel/rank_commands.h"
#include "parallel/thread_parallel.h"

namespace mlaserve {
namespace {

ParallelOptions parallel_options(const ParallelFlags& flags) {
  ParallelOptions options;
  options.size = flags.tp;
  options.expert_parallel = flags.ep;
  options.collective_timeout = std::chrono::milliseconds(int64_t(flags.comm_timeout_s * 1000));
  options.copy_weights = flags.repack;
  options.lock_weights = flags.mlock;
  options.numa = parse_numa_mode(flags.numa);
  return options;
}

int env_int(const char* ompi_name, const char* mpich_name, int fallback) {
  const char* value = std::getenv(ompi_name);
  if (!value) value = std::getenv(mpich_name);
  return value ? std::atoi(value) : fallback;
}

// Where this process runs when it is one rank (--tp 1, or an MPI process), its threads bound
// to it (the kernel pool restarted, so that its workers inherit the binding). Under mpirun the
// ranks on this machine split it as thread ranks do, unless the launcher already bound them
// (--bind-to numa): then each keeps what it was given.
RankPlacement place_this_process(const ParallelFlags& flags) {
  const NumaTopology topology = NumaTopology::read();
  const std::vector<int> allowed = this_thread_cpus();
  size_t machine_cpus = 0;
  for (const NumaNode& node : topology.nodes) machine_cpus += node.cpus.size();
  int rank = 0, ranks = 1;
  if (launched_by_mpi() && allowed.size() >= machine_cpus) {
    ranks = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", 1));
    rank = std::clamp(env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", 0), 0, ranks - 1);
  }
  const RankPlacement placement = plan_rank_placement(topology, allowed, rank, ranks, parse_numa_mode(flags.numa));
  if (!placement.placed()) return placement;
  if (const std::string error = bind_this_thread(placement); !error.empty()) {
    spdlog::warn("could not bind this process to {} ({}); it runs unbound", placement.describe(), error);
    return {};
  }
  set_num_threads(default_num_threads());
  spdlog::info("this process: {}", placement.describe());
  return placement;
}

// The model a single rank runs: a shard of size 1 (repacked, locked, on its NUMA node(s)) when
// either is asked for.
std::unique_ptr<CausalLM> single_rank_copy(const CausalLM& model, const ParallelFlags& flags,
                                           const RankPlacement& placement) {
  if (!flags.repack && !flags.mlock) return nullptr;
  return model.shard({0, 1, false, flags.repack, flags.mlock, placement.nodes}, nullptr);
}

class SingleRunner : public SequenceRunner {
 public:
  SingleRunner(const CausalLM& model, const ParallelFlags& flags, int64_t capacity)
      : placement_(place_this_process(flags)),
        copy_(single_rank_copy(model, flags, placement_)),
        model_(copy_ ? *copy_ : model),
        cache_(model.config(), capacity) {
    place_cache_pool(cache_.view().pool, cache_.bytes(), placement_.nodes);
  }
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits, MlaPath path) override {
    model_.forward(tokens, start, cache_.view(), all_logits, logits, path);
  }

 private:
  RankPlacement placement_;
  std::unique_ptr<CausalLM> copy_;
  const CausalLM& model_;
  SequenceCache cache_;
};

class ThreadRunner : public SequenceRunner {
 public:
  ThreadRunner(const CausalLM& model, const ParallelOptions& options, int64_t capacity)
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

// This process's shard of the model under mpirun, on its NUMA node(s).
std::unique_ptr<CausalLM> mpi_shard(const CausalLM& model, const ParallelFlags& flags, Communicator& comm,
                                    const RankPlacement& placement) {
  MLA_CHECK(flags.tp == 1 || flags.tp == comm.size(), "--tp {} does not match the MPI world size {} (mpirun -np)",
            flags.tp, comm.size());
  if (comm.rank() == 0)
    spdlog::info("{} MPI ranks, {} parallel MoE, {} heads per rank", comm.size(), flags.ep ? "expert" : "tensor",
                 model.config().num_attention_heads / comm.size());
  return model.shard({comm.rank(), comm.size(), flags.ep, flags.repack, flags.mlock, placement.nodes}, &comm);
}

// Under mpirun every process runs the same command on its own shard and latent cache; the
// all-gathered logits are identical everywhere, so every rank samples the same tokens.
class MpiRunner : public SequenceRunner {
 public:
  MpiRunner(const CausalLM& model, const ParallelFlags& flags, int64_t capacity)
      : placement_(place_this_process(flags)),
        comm_(make_mpi_communicator()),
        cache_(model.config(), capacity),
        shard_(mpi_shard(model, flags, *comm_, placement_)) {
    place_cache_pool(cache_.view().pool, cache_.bytes(), placement_.nodes);
  }
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits, MlaPath path) override {
    shard_->forward(tokens, start, cache_.view(), all_logits, logits, path);
  }
  bool writes_output() const override { return comm_->rank() == 0; }
  double collective_seconds() const override { return comm_->collective_seconds(); }
  int ranks() const override { return comm_->size(); }

 private:
  RankPlacement placement_;
  std::unique_ptr<Communicator> comm_;
  SequenceCache cache_;
  std::unique_ptr<CausalLM> shard_;
};

class ThreadRanksExecutor : public ModelExecutor {
 public:
  ThreadRanksExecutor(const CausalLM& model, const ParallelOptions& options) : ranks_(model, options) {}
  const ModelConfig& config() const override { return ranks_.config(); }
  int ranks() const override { return ranks_.size(); }
  std::string describe() const override { return fmt::format("{} ranks (threads)", ranks_.size()); }
  void* allocate_cache(size_t bytes) override {
    for (int rank = 0; rank < ranks_.size(); ++rank) {
      pools_.emplace_back(new uint8_t[bytes]);
      pool_addresses_.push_back(pools_.back().get());
      place_cache_pool(pool_addresses_.back(), bytes, ranks_.placement(rank).nodes);
    }
    return pool_addresses_[0];
  }
  void forward(std::span<const ForwardSequence> batch, float* logits) override {
    ranks_.forward(batch, logits, pool_addresses_);
  }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override {
    for (void* pool : pool_addresses_) copy_within(pool, from, to, bytes);
  }

 private:
  ThreadParallelModel ranks_;
  std::vector<std::unique_ptr<uint8_t[]>> pools_;
  std::vector<void*> pool_addresses_;
};

// Rank 0 of an MPI job: every command it runs is first broadcast to the followers.
class MpiLeaderExecutor : public ModelExecutor {
 public:
  MpiLeaderExecutor(const CausalLM& model, const ParallelFlags& flags)
      : placement_(place_this_process(flags)),
        comm_(make_mpi_communicator()),
        shard_(mpi_shard(model, flags, *comm_, placement_)) {}
  ~MpiLeaderExecutor() override { send_stop(*comm_); }
  const ModelConfig& config() const override { return shard_->config(); }
  int ranks() const override { return comm_->size(); }
  std::string describe() const override { return fmt::format("{} MPI ranks", comm_->size()); }
  void* allocate_cache(size_t bytes) override {
    send_allocate_cache(*comm_, int64_t(bytes));
    pool_.reset(new uint8_t[bytes]);
    place_cache_pool(pool_.get(), bytes, placement_.nodes);
    return pool_.get();
  }
  void forward(std::span<const ForwardSequence> batch, float* logits) override {
    send_forward(*comm_, batch);
    shard_->forward(batch, logits);
  }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override {
    send_copy_in_cache(*comm_, from, to, bytes);
    copy_within(pool_.get(), from, to, bytes);
  }

 private:
  RankPlacement placement_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<CausalLM> shard_;
  std::unique_ptr<uint8_t[]> pool_;
};

void log_machine() { spdlog::info("kernels: {}", kernel_features()); }

}  // namespace

std::unique_ptr<ModelExecutor> create_model_executor(const CausalLM& model, const ParallelFlags& flags) {
  MLA_CHECK(flags.tp >= 1, "--tp must be at least 1");
  log_machine();
  if (launched_by_mpi()) return std::make_unique<MpiLeaderExecutor>(model, flags);
  if (flags.tp == 1) {
    const RankPlacement placement = place_this_process(flags);
    auto copy = single_rank_copy(model, flags, placement);
    return copy ? std::make_unique<SingleRankExecutor>(std::move(copy), placement.nodes)
                : std::make_unique<SingleRankExecutor>(model, placement.nodes);
  }
  return std::make_unique<ThreadRanksExecutor>(model, parallel_options(flags));
}

bool is_mpi_follower() { return launched_by_mpi() && make_mpi_communicator()->rank() != 0; }

void follow_rank_zero(const CausalLM& model, const ParallelFlags& flags) {
  const RankPlacement placement = place_this_process(flags);
  auto comm = make_mpi_communicator();
  auto shard = mpi_shard(model, flags, *comm, placement);
  std::unique_ptr<uint8_t[]> pool;
  std::vector<float> logits;
  for (;;) {
    RankCommand command = receive_rank_command(*comm, pool.get());
    if (command.kind == RankCommandKind::Stop) return;
    if (command.kind == RankCommandKind::AllocateCache) {
      pool.reset(new uint8_t[size_t(command.cache_bytes)]);
      place_cache_pool(pool.get(), size_t(command.cache_bytes), placement.nodes);
      continue;
    }
    if (command.kind == RankCommandKind::CopyInCache) {
      copy_within(pool.get(), command.copy_from, command.copy_to, command.cache_bytes);
      continue;
    }
    MLA_CHECK(command.kind == RankCommandKind::Forward && pool, "unexpected command {} from rank 0", int64_t(command.kind));
    logits.resize(size_t(logit_rows(command.batch) * shard->config().vocab_size));
    shard->forward(command.batch, logits.data());
  }
}

void add_parallel_flags(CLI::App* cmd, ParallelFlags& flags) {
  cmd->add_option("--tp", flags.tp, "ranks (threads) the model is split over: heads, MLP columns, vocab")->capture_default_str();
  cmd->add_flag("--ep", flags.ep, "split the MoE experts over the ranks (expert parallelism) instead of their columns");
  cmd->add_option("--comm-timeout", flags.comm_timeout_s, "seconds a rank waits in a collective before failing")->capture_default_str();
  cmd->add_flag("!--no-repack", flags.repack,
                "keep the weights in the mapped checkpoint (by default each rank copies its MLP, expert and "
                "attention projections and LM head at load, BF16 (and, with AVX2 or AVX-512 VNNI and no AMX, INT4 and "
                "MXFP4) into the CPU kernels' panel layouts and other formats as stored, onto huge pages: faster prefill and decode, those weights no longer paged "
                "from the file)");
  cmd->add_option("--numa", flags.numa,
                  "auto: on a machine with several NUMA nodes bind each rank's threads to its node(s) (ranks split "
                  "the nodes, or share a node's cores) and put its weight copies and latent cache there, a lone "
                  "rank's interleaved over all nodes; bind: the same on one node; off: leave them to the kernel")
      ->check(CLI::IsMember({"auto", "bind", "off"}))
      ->capture_default_str();
  cmd->add_option("--act-quant", flags.act_quant,
                  "activations of INT4 and MXFP4 layers: int8 (rounded per 32 columns for integer dot products, as "
                  "llama.cpp does; fast) | off (fp32 against the dequantized weights: the exact maths, slower)")
      ->check(CLI::IsMember({"int8", "off"}))
      ->capture_default_str();
  cmd->add_flag("--mlock", flags.mlock,
                "lock each rank's weights in RAM (mlock) so memory pressure cannot page them out; needs "
                "CAP_IPC_LOCK or a large enough `ulimit -l` (warns and runs unlocked otherwise)");
}

std::unique_ptr<SequenceRunner> SequenceRunner::create(const CausalLM& model, const ParallelFlags& flags,
                                                       int64_t capacity) {
  MLA_CHECK(flags.tp >= 1, "--tp must be at least 1");
  log_machine();
  if (launched_by_mpi()) return std::make_unique<MpiRunner>(model, flags, capacity);
  if (flags.tp == 1) return std::make_unique<SingleRunner>(model, flags, capacity);
  return std::make_unique<ThreadRunner>(model, parallel_options(flags), capacity);
}

}  // namespace mlaserve
