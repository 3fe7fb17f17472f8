// A model run as ranks that are threads of this process, the way it would run on as many
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

#include "engine/executor.h"
#include "parallel/communicator.h"

namespace mlaserve {

class ThreadParallelModel {
 public:
  ThreadParallelModel(const CausalLM& full, const ExecutorOptions& options);
  ~ThreadParallelModel();

  const ModelConfig& config() const { return config_; }
  int size() const { return int(shards_.size()); }
  const CausalLM& shard(int rank) const { return *shards_.at(size_t(rank)); }
  const RankPlacement& placement(int rank) const { return placements_[size_t(rank)]; }
  double collective_seconds(int rank) const { return comms_[size_t(rank)]->collective_seconds(); }

  // The batch on every rank, rank r reading and writing its latent cache in rank_pools[r]
  // (same layout and block tables as the pool the batch's views name); rank 0's logits and
  // hidden states.
  void forward(std::span<const ForwardSequence> batch, float* logits, std::span<void* const> rank_pools,
               const HiddenStates* hidden = nullptr);

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
  const HiddenStates* hidden_ = nullptr;  // the step's, for rank 0
};

// The engine's executor over thread ranks: a ThreadParallelModel and a cache pool per rank.
class ThreadRanksExecutor : public ModelExecutor {
 public:
  ThreadRanksExecutor(const CausalLM& model, const ExecutorOptions& options) : ranks_(model, options) {}
  const ModelConfig& config() const override { return ranks_.config(); }
  int ranks() const override { return ranks_.size(); }
  std::string describe() const override;
  void* allocate_cache(size_t bytes) override;
  void forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden = nullptr) override;
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override;
  double collective_seconds() const override { return ranks_.collective_seconds(0); }
  RankWeightBytes weight_bytes() const override;
  const RankPlacement& placement(int rank) const { return ranks_.placement(rank); }
  void* pool(int rank) const { return pool_addresses_.at(size_t(rank)); }

 private:
  ThreadParallelModel ranks_;
  std::vector<std::unique_ptr<uint8_t[]>> pools_;
  std::vector<void*> pool_addresses_;
};

}  // namespace mlaserve
