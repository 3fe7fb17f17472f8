// A model run as `size` ranks that are threads of this process, the way it would run on `size`
// devices: each rank holds its shard (heads, columns or experts; views into the one mapped
// checkpoint), its own full latent cache (replicated, as every rank of a real deployment keeps
// one) and its own thread pool, and the ranks meet in all-reduces after attention and FFN.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "base/numa.h"
#include "model/causal_lm.h"
#include "parallel/communicator.h"

namespace mlaserve {

struct ParallelOptions {
  int size = 1;                  // ranks (tensor-parallel size)
  bool expert_parallel = false;  // MoE experts split over the ranks instead of their columns
  int threads = 0;               // kernel threads in all (0: the process default), split over ranks
  std::chrono::milliseconds collective_timeout{120000};
  bool copy_weights = false;      // ShardSpec::copy_weights
  bool lock_weights = false;     // ShardSpec::lock_weights
  NumaMode numa = NumaMode::Auto;  // each rank's threads and memory on its NUMA node(s) (plan_rank_placement)
};

class ThreadParallelModel {
 public:
  ThreadParallelModel(const CausalLM& full, const ParallelOptions& options);
  ~ThreadParallelModel();

  const ModelConfig& config() const { return config_; }
  int size() const { return int(shards_.size()); }
  const RankPlacement& placement(int rank) const { return placements_[size_t(rank)]; }
  double collective_seconds(int rank) const { return comms_[size_t(rank)]->collective_seconds(); }

  struct Sequence {
    std::vector<std::unique_ptr<SequenceCache>> caches;  // one per rank
  };
  std::unique_ptr<Sequence> new_sequence(int64_t capacity) const;  // each rank's cache on its node(s)
  // As CausalLM::forward for one sequence; rank 0's logits land in `logits`.
  void forward(Sequence& sequence, std::span<const int32_t> tokens, int64_t start_position, bool all_logits,
               float* logits, MlaPath path = MlaPath::Auto);
  // The batch on every rank, rank r reading and writing its latent cache in rank_pools[r]
  // (same layout and block tables as the pool the batch's views name); rank 0's logits.
  void forward(std::span<const ForwardSequence> batch, float* logits, std::span<void* const> rank_pools);

 private:
  void run_on_all_ranks(const std::function<void(int rank)>& job);
  void rank_loop(int rank, int threads);

  ModelConfig config_;
  std::vector<RankPlacement> placements_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<CausalLM>> shards_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable work_ready_, work_done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::string> errors_;  // per rank, from the last job
  // A step's batch as each rank sees it (its own cache pool) and ranks 1..'s logits, reused.
  std::vector<std::vector<ForwardSequence>> rank_batches_;
  std::vector<std::vector<float>> rank_logits_;
};

}  // namespace mlaserve
