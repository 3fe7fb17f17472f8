#include "engine/thread_ranks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/thread_pool.h"
#include "parallel/thread_communicator.h"

namespace mlaserve {

ThreadParallelModel::ThreadParallelModel(const CausalLM& full, const ExecutorOptions& options)
    : config_(full.config()), errors_(size_t(options.ranks)) {
  MLA_CHECK(options.ranks >= 1, "the tensor-parallel size must be at least 1, got {}", options.ranks);
  comms_ = make_thread_communicators(options.ranks, options.collective_timeout);
  const NumaTopology topology = NumaTopology::read();
  const std::vector<int> allowed_cpus = this_thread_cpus();
  for (int rank = 0; rank < options.ranks; ++rank) {
    placements_.push_back(plan_rank_placement(topology, allowed_cpus, rank, options.ranks, options.numa));
    if (placements_.back().placed()) spdlog::info("rank {}: {}", rank, placements_.back().describe());
  }
  for (int rank = 0; rank < options.ranks; ++rank)
    shards_.push_back(full.shard(options.shard_spec(rank, options.ranks, placements_[size_t(rank)].nodes),
                                 comms_[size_t(rank)].get()));
  rank_batches_.resize(size_t(options.ranks));
  rank_logits_.resize(size_t(options.ranks));
  const int total = options.threads > 0 ? options.threads : default_num_threads();
  const int per_rank = std::max(1, total / options.ranks);
  spdlog::info("{} ranks (threads), {} parallel MoE, {} kernel thread(s) each, {} heads per rank", options.ranks,
               options.expert_parallel ? "expert" : "tensor", per_rank, config_.num_attention_heads / options.ranks);
  for (int rank = 0; rank < options.ranks; ++rank)
    threads_.emplace_back([this, rank, per_rank] { rank_loop(rank, per_rank); });
}

ThreadParallelModel::~ThreadParallelModel() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ThreadParallelModel::rank_loop(int rank, int threads) {
  // The pool's workers inherit this thread's CPUs and memory policy.
  if (const std::string error = bind_this_thread(placements_[size_t(rank)]); !error.empty())
    spdlog::warn("rank {}: could not bind it to {} ({}); it runs unbound", rank, placements_[size_t(rank)].describe(),
                 error);
  ScopedThreadPool pool(threads);
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      job = job_;
    }
    std::string error;
    try {
      (*job)(rank);
    } catch (const std::exception& e) {
      error = e.what();
      comms_[size_t(rank)]->abort();  // the other ranks must not wait for this one
    }
    std::lock_guard lock(mutex_);
    errors_[size_t(rank)] = error;
    if (--pending_ == 0) work_done_.notify_all();
  }
}

void ThreadParallelModel::run_on_all_ranks(const std::function<void(int)>& job) {
  std::unique_lock lock(mutex_);
  job_ = &job;
  pending_ = size();
  ++generation_;
  work_ready_.notify_all();
  work_done_.wait(lock, [&] { return pending_ == 0; });
  // Report the rank that failed first-hand rather than those its abort woke up.
  std::string first_error;
  for (const auto& error : errors_)
    if (!error.empty() && (first_error.empty() || first_error.find("aborted") != std::string::npos))
      first_error = error;
  MLA_CHECK(first_error.empty(), "{}", first_error);
}

void ThreadParallelModel::forward(std::span<const ForwardSequence> batch, float* logits,
                                  std::span<void* const> rank_pools, const HiddenStates* hidden) {
  MLA_CHECK(int(rank_pools.size()) == size(), "{} cache pools for {} ranks", rank_pools.size(), size());
  const size_t rows = size_t(logit_rows(batch));
  for (int rank = 0; rank < size(); ++rank) {
    rank_batches_[size_t(rank)].assign(batch.begin(), batch.end());
    for (auto& seq : rank_batches_[size_t(rank)]) seq.cache.pool = rank_pools[size_t(rank)];
    if (rank > 0) rank_logits_[size_t(rank)].resize(rows * size_t(config_.vocab_size));
  }
  hidden_ = hidden;
  // Two pointers captured: std::function holds them in place, without allocating.
  run_on_all_ranks([this, logits](int rank) {
    shards_[size_t(rank)]->forward(rank_batches_[size_t(rank)], rank == 0 ? logits : rank_logits_[size_t(rank)].data(),
                                   rank == 0 ? hidden_ : nullptr);
  });
}

std::string ThreadRanksExecutor::describe() const { return fmt::format("{} ranks (threads)", ranks_.size()); }

void* ThreadRanksExecutor::allocate_cache(size_t bytes) {
  MLA_CHECK(pools_.empty(), "the thread ranks' cache pools are allocated once");
  for (int rank = 0; rank < ranks_.size(); ++rank) {
    pools_.emplace_back(new uint8_t[bytes]);
    pool_addresses_.push_back(pools_.back().get());
    place_cache_pool(pool_addresses_.back(), bytes, ranks_.placement(rank).nodes);
  }
  return pool_addresses_[0];
}

void ThreadRanksExecutor::forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden) {
  ranks_.forward(batch, logits, pool_addresses_, hidden);
}

void ThreadRanksExecutor::copy_in_cache(int64_t from, int64_t to, int64_t bytes) {
  for (void* pool : pool_addresses_) copy_within(pool, from, to, bytes);
}

RankWeightBytes ThreadRanksExecutor::weight_bytes() const {
  RankWeightBytes bytes;
  for (int rank = 0; rank < ranks_.size(); ++rank) {
    bytes.active_per_token += ranks_.shard(rank).active_weight_bytes_per_token();
    bytes.routed_experts += ranks_.shard(rank).routed_expert_bytes();
  }
  return bytes;
}

}  // namespace mlaserve
