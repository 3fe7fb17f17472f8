#include "engine/mpi_ranks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <optional>
#include <span>
#include <vector>

#include "base/error.h"
#include "parallel/mpi_world.h"

namespace mlaserve {
namespace {

enum class RankCommandKind : int64_t { AllocateCache = 1, Forward = 2, Stop = 3, CopyInCache = 4 };

// A command as a follower sees it. For Forward, `batch` views the message's own tokens and
// block tables (in `ids`) and points at `pool`, the follower's pool.
struct RankCommand {
  RankCommandKind kind = RankCommandKind::Stop;
  int64_t cache_bytes = 0;             // AllocateCache; CopyInCache: the bytes copied
  int64_t copy_from = 0, copy_to = 0;  // CopyInCache
  std::vector<ForwardSequence> batch;
  std::vector<int64_t> message;
  std::vector<int32_t> ids;  // block tables and tokens the batch's spans point into
};

// Message layout (int64 words): kind, then for Forward: n_sequences and per sequence
// n_tokens, start_position, path, logits, cache dtype, n_blocks, block_size, n_layers,
// latent_dim, state_offset, rope_dim, the block table (one word each) and the tokens (one word each).
constexpr int64_t kSequenceHeader = 11;

void send(Communicator& comm, std::vector<int64_t> message) {
  int64_t length = int64_t(message.size());
  comm.broadcast(&length, sizeof length, 0);
  comm.broadcast(message.data(), length * int64_t(sizeof(int64_t)), 0);
}

void send_allocate_cache(Communicator& comm, int64_t bytes) {
  send(comm, {int64_t(RankCommandKind::AllocateCache), bytes});
}

void send_stop(Communicator& comm) { send(comm, {int64_t(RankCommandKind::Stop)}); }

void send_copy_in_cache(Communicator& comm, int64_t from, int64_t to, int64_t bytes) {
  send(comm, {int64_t(RankCommandKind::CopyInCache), bytes, from, to});
}

void send_forward(Communicator& comm, std::span<const ForwardSequence> batch) {
  std::vector<int64_t> message = {int64_t(RankCommandKind::Forward), int64_t(batch.size())};
  for (const ForwardSequence& seq : batch) {
    const LatentCacheView& cache = seq.cache;
    message.insert(message.end(), {int64_t(seq.tokens.size()), seq.start_position, int64_t(seq.path),
                                   int64_t(seq.logits), int64_t(cache.dtype), cache.n_blocks, cache.block_size,
                                   cache.n_layers, cache.latent_dim, cache.state_offset, cache.rope_dim});
    message.insert(message.end(), cache.block_table, cache.block_table + cache.n_blocks);
    message.insert(message.end(), seq.tokens.begin(), seq.tokens.end());
  }
  send(comm, std::move(message));
}

// Waits (sleeping, not spinning, between polls) for rank 0's next command.
RankCommand receive_rank_command(Communicator& comm, void* pool) {
  int64_t length = 0;
  comm.broadcast(&length, sizeof length, 0);
  MLA_CHECK(length >= 1, "rank 0 sent an empty command");
  RankCommand command;
  std::vector<int64_t>& words = command.message;
  words.resize(size_t(length));
  comm.broadcast(words.data(), length * int64_t(sizeof(int64_t)), 0);
  command.kind = RankCommandKind(words[0]);
  if (command.kind == RankCommandKind::AllocateCache) command.cache_bytes = words.at(1);
  if (command.kind == RankCommandKind::CopyInCache) {
    command.cache_bytes = words.at(1);
    command.copy_from = words.at(2);
    command.copy_to = words.at(3);
  }
  if (command.kind != RankCommandKind::Forward) return command;
  // Block tables and tokens, narrowed back to int32 in one buffer the batch's spans view.
  command.ids.reserve(words.size());
  size_t at = 2;
  for (int64_t s = 0; s < words.at(1); ++s) {
    MLA_CHECK(at + kSequenceHeader <= words.size(), "truncated forward command from rank 0");
    const int64_t* h = &words[at];
    ForwardSequence seq;
    seq.start_position = h[1];
    seq.path = MlaPath(h[2]);
    seq.logits = ForwardSequence::Logits(h[3]);
    seq.cache = {pool, CacheDType(h[4]), nullptr, h[5], h[6], h[7], h[8], h[9], h[10]};
    const int64_t n_tokens = h[0], n_blocks = h[5];
    at += kSequenceHeader;
    MLA_CHECK(n_tokens >= 0 && n_blocks >= 0 && at + size_t(n_blocks + n_tokens) <= words.size(),
              "truncated forward command from rank 0");
    const size_t first = command.ids.size();
    for (int64_t i = 0; i < n_blocks + n_tokens; ++i) command.ids.push_back(int32_t(words[at + size_t(i)]));
    seq.cache.block_table = command.ids.data() + first;
    seq.tokens = std::span<const int32_t>(command.ids.data() + first + n_blocks, size_t(n_tokens));
    at += size_t(n_blocks + n_tokens);
    command.batch.push_back(seq);
  }
  return command;
}

// This process's shard of the model under mpirun, on its NUMA node(s).
std::unique_ptr<CausalLM> mpi_shard(const CausalLM& model, const ExecutorOptions& options, Communicator& comm,
                                    const RankPlacement& placement) {
  MLA_CHECK(options.ranks == 1 || options.ranks == comm.size(),
            "--tp {} does not match the MPI world size {} (mpirun -np)", options.ranks, comm.size());
  if (comm.rank() == 0)
    spdlog::info("{} MPI ranks, {} parallel MoE, {} heads per rank", comm.size(),
                 options.expert_parallel ? "expert" : "tensor", model.config().num_attention_heads / comm.size());
  return model.shard(options.shard_spec(comm.rank(), comm.size(), placement.nodes), &comm);
}

class MpiLeaderExecutor : public ModelExecutor {
 public:
  MpiLeaderExecutor(const CausalLM& model, const ExecutorOptions& options)
      : placement_(place_this_process(options.numa)),
        comm_(make_mpi_communicator(options.collective_timeout)),
        shard_(mpi_shard(model, options, *comm_, placement_)) {}
  ~MpiLeaderExecutor() override {
    if (!lost_) send_stop(*comm_);
  }
  const ModelConfig& config() const override { return shard_->config(); }
  int ranks() const override { return comm_->size(); }
  std::string describe() const override { return fmt::format("{} MPI ranks", comm_->size()); }
  void* allocate_cache(size_t bytes) override {
    collectively([&] { send_allocate_cache(*comm_, int64_t(bytes)); });
    pool_.reset(new uint8_t[bytes]);
    place_cache_pool(pool_.get(), bytes, placement_.nodes);
    return pool_.get();
  }
  void forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden = nullptr) override {
    collectively([&] {
      send_forward(*comm_, batch);
      shard_->forward(batch, logits, hidden);
    });
  }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override {
    collectively([&] { send_copy_in_cache(*comm_, from, to, bytes); });
    copy_within(pool_.get(), from, to, bytes);
  }
  double collective_seconds() const override { return comm_->collective_seconds(); }
  RankWeightBytes weight_bytes() const override {
    const double ranks = double(comm_->size());
    return {shard_->active_weight_bytes_per_token() * ranks, shard_->routed_expert_bytes() * ranks};
  }

 private:
  // Runs work that takes part in collectives; a collective that times out loses the ranks for good.
  template <class Work>
  void collectively(Work work) {
    if (lost_) throw ExecutorLost(*lost_);
    try {
      work();
    } catch (const CollectiveTimeout& e) {
      lost_ = fmt::format("the model's MPI ranks have failed: {}", e.what());
      throw ExecutorLost(*lost_);
    }
  }

  std::optional<std::string> lost_;
  RankPlacement placement_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<CausalLM> shard_;
  std::unique_ptr<uint8_t[]> pool_;
};

}  // namespace

std::unique_ptr<ModelExecutor> make_mpi_leader_executor(const CausalLM& model, const ExecutorOptions& options) {
  return std::make_unique<MpiLeaderExecutor>(model, options);
}

void follow_rank_zero(const CausalLM& model, const ExecutorOptions& options) {
  const RankPlacement placement = place_this_process(options.numa);
  auto comm = make_mpi_communicator();
  auto shard = mpi_shard(model, options, *comm, placement);
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
    MLA_CHECK(command.kind == RankCommandKind::Forward && pool, "unexpected command {} from rank 0",
              int64_t(command.kind));
    logits.resize(size_t(logit_rows(command.batch) * shard->config().vocab_size));
    shard->forward(command.batch, logits.data());
  }
}

}  // namespace mlaserve
