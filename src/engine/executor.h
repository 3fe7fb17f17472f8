// How every command runs the model: on one rank, on thread ranks of this process, or as rank
// 0 of an MPI job that tells the other ranks what to run (mpi_ranks.h). The engine drives an
// executor batch by batch (serve, generate, bench-model), and so does SingleSequence (logits,
// perplexity). Every rank keeps its own full copy of the latent cache pool (the latent is
// shared by all heads, so a rank that holds some heads still needs all of it) at the same
// block offsets, so one block table serves every rank.
#pragma once
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/numa.h"
#include "model/causal_lm.h"

namespace mlaserve {

struct ExecutorOptions {
  int ranks = 1;                 // ranks the model is split over (--tp; under mpirun, the world)
  bool expert_parallel = false;  // MoE experts split over the ranks instead of their columns
  int threads = 0;               // kernel threads in all (0: the process default), split over thread ranks
  std::chrono::milliseconds collective_timeout{120000};
  bool copy_weights = false;       // ShardSpec::copy_weights (at one rank too)
  bool lock_weights = false;       // ShardSpec::lock_weights (at one rank too)
  bool requantize_q4 = false;      // ShardSpec::requantize_q4
  NumaMode numa = NumaMode::Auto;  // each rank's threads and memory on its NUMA node(s) (plan_rank_placement)

  ShardSpec shard_spec(int rank, int size, std::vector<int> numa_nodes) const {
    return {rank, size, expert_parallel, copy_weights, lock_weights, requantize_q4, std::move(numa_nodes)};
  }
};

// The executor can run no more steps (an MPI rank has died or stopped answering): every request
// fails with this message and the server exits.
class ExecutorLost : public Error {
 public:
  using Error::Error;
};

// Bytes of the weights the ranks hold as they run them (after any load-time repacking or
// requantization): what one decoded token alone reads, and all the routed experts.
struct RankWeightBytes {
  double active_per_token = 0, routed_experts = 0;
};

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int ranks() const { return 1; }
  // What runs the model, for the start-up log.
  virtual std::string describe() const = 0;
  // Gives every rank a cache pool of `bytes` (once); returns rank 0's: the pool the views name.
  virtual void* allocate_cache(size_t bytes) = 0;
  // Runs the batch on every rank, each in its own pool; logits: [logit_rows(batch), vocab];
  // hidden: rank 0's CausalLM::forward hidden states (every rank's residual is whole).
  virtual void forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden = nullptr) = 0;
  // Copies bytes [from, from + bytes) of every rank's pool to [to, to + bytes) of the same pool
  // (recurrent-state snapshots).
  virtual void copy_in_cache(int64_t from, int64_t to, int64_t bytes) = 0;
  // Seconds rank 0 has spent in collectives (waiting for the other ranks included).
  virtual double collective_seconds() const { return 0; }
  // Summed over the ranks (under MPI rank 0's times the ranks: the shards are even splits).
  virtual RankWeightBytes weight_bytes() const = 0;
};

// memmove inside one pool.
void copy_within(void* pool, int64_t from, int64_t to, int64_t bytes);

// The whole model on this thread's kernel pool; its cache pool on `numa_nodes` (place_memory).
class SingleRankExecutor : public ModelExecutor {
 public:
  explicit SingleRankExecutor(const CausalLM& model, std::vector<int> numa_nodes = {})
      : model_(model), numa_nodes_(std::move(numa_nodes)) {}
  explicit SingleRankExecutor(std::unique_ptr<CausalLM> owned, std::vector<int> numa_nodes = {})
      : owned_(std::move(owned)), model_(*owned_), numa_nodes_(std::move(numa_nodes)) {}
  const ModelConfig& config() const override { return model_.config(); }
  std::string describe() const override { return "1 rank"; }
  void* allocate_cache(size_t bytes) override;
  void forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden = nullptr) override {
    model_.forward(batch, logits, hidden);
  }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override;
  RankWeightBytes weight_bytes() const override {
    return {model_.active_weight_bytes_per_token(), model_.routed_expert_bytes()};
  }

 private:
  std::unique_ptr<CausalLM> owned_;  // the model_ it runs, when it owns it
  const CausalLM& model_;
  std::vector<int> numa_nodes_;
  std::unique_ptr<uint8_t[]> pool_;
};

// The executor `options` ask for: under mpirun rank 0's (the others call follow_rank_zero),
// else one rank or options.ranks thread ranks. Logs the kernels in use.
std::unique_ptr<ModelExecutor> create_executor(const CausalLM& model, const ExecutorOptions& options);

// Under mpirun, true on every rank but 0: such a rank calls follow_rank_zero instead of doing
// the command's own work.
bool is_mpi_follower();
// Runs rank 0's commands on this rank's shard until rank 0 says stop.
void follow_rank_zero(const CausalLM& model, const ExecutorOptions& options);

// Binds this process's threads to its NUMA node(s) when it is one rank (one rank, or an MPI
// process) and the mode asks for it, restarting the kernel pool so its workers inherit the
// binding. Under mpirun the ranks on this machine split it as thread ranks do, unless the
// launcher already bound them (--bind-to numa). Returns where it runs (unplaced: anywhere).
RankPlacement place_this_process(NumaMode numa);

}  // namespace mlaserve
