#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>

namespace mlaserve {
namespace {

// A worker's spin for the next task before it sleeps, and the caller's for the last chunks:
// some tens of microseconds (a pause takes 10-40 ns), longer than the gaps between the kernels
// of a decode step and than two threads' chunks differ. Longer spins cost a shared machine:
// a spinning thread takes the core a descheduled one needs.
constexpr int kSpinIterations = 2000;
constexpr int kWaitSpinIterations = 3000;

// cursor_: generation in the top 24 bits, the task's chunk count in the next 20, the next
// chunk to claim in the low 20. A worker claims chunk `next` of the current task by one
// compare-and-swap; a worker late from an earlier task fails it (the generation moved on).
constexpr int kChunkBits = 20;
constexpr uint64_t kChunkMask = (uint64_t(1) << kChunkBits) - 1;
uint64_t pack_cursor(uint64_t generation, int64_t chunks) {
  return generation << (2 * kChunkBits) | uint64_t(chunks) << kChunkBits;
}
uint64_t generation_of(uint64_t cursor) { return cursor >> (2 * kChunkBits); }
int64_t chunks_of(uint64_t cursor) { return int64_t(cursor >> kChunkBits & kChunkMask); }
int64_t next_of(uint64_t cursor) { return int64_t(cursor & kChunkMask); }

// Chunk c of `chunks` over n items, rounded to whole grains.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int64_t grain, int64_t chunks, int64_t c) {
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t begin = grains * c / chunks * grain;
  const int64_t end = grains * (c + 1) / chunks * grain;
  return {std::min(begin, n), std::min(end, n)};
}

std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

thread_local ThreadPool* local_pool = nullptr;

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int w = 1; w < n_threads_; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(n_threads_));
  task_ = &fn;
  task_items_ = n;
  task_grain_ = grain;
  task_error_ = nullptr;
  chunks_done_.store(0, std::memory_order_relaxed);
  // The next generation (pack_cursor drops the bits that wrap); only this thread stores cursor_
  // outside a claim, and no claim is possible between tasks.
  const uint64_t generation = generation_of(cursor_.load(std::memory_order_relaxed)) + 1;
  {
    std::lock_guard lock(mutex_);  // publishes the task to sleeping workers
    cursor_.store(pack_cursor(generation, chunks), std::memory_order_release);
  }
  work_ready_.notify_all();
  run_chunks(0);
  wait_until_done(chunks);
  task_ = nullptr;
  if (task_error_) std::rethrow_exception(task_error_);
}

void ThreadPool::run_chunks(int worker) {
  uint64_t cursor = cursor_.load(std::memory_order_acquire);
  while (next_of(cursor) < chunks_of(cursor)) {
    if (!cursor_.compare_exchange_weak(cursor, cursor + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    // Claimed: the task is this cursor's until the chunk is counted done.
    const int64_t chunks = chunks_of(cursor);  // read here: the last count done lets the caller go on
    const auto [begin, end] = chunk_range(task_items_, task_grain_, chunks, next_of(cursor));
    try {
      if (begin < end) (*task_)(begin, end, worker);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!task_error_) task_error_ = std::current_exception();
    }
    if (chunks_done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) chunks_done_.notify_one();
    cursor = cursor_.load(std::memory_order_acquire);
  }
}

void ThreadPool::wait_until_done(int64_t chunks) {
  for (int spin = 0;; ++spin) {
    const int32_t done = chunks_done_.load(std::memory_order_acquire);
    if (done == chunks) return;
    if (spin < kWaitSpinIterations) {
      _mm_pause();
    } else {
      chunks_done_.wait(done, std::memory_order_acquire);
    }
  }
}

bool ThreadPool::wait_for_work(uint64_t seen_generation) {
  const auto current = [&] { return generation_of(cursor_.load(std::memory_order_acquire)); };
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (current() != seen_generation) return true;
    if (stopping_.load(std::memory_order_relaxed)) return false;
    _mm_pause();
  }
  std::unique_lock lock(mutex_);
  work_ready_.wait(lock, [&] { return stopping_ || current() != seen_generation; });
  return !stopping_;
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen_generation = 0;
  while (wait_for_work(seen_generation)) {
    seen_generation = generation_of(cursor_.load(std::memory_order_acquire));
    run_chunks(worker);
  }
}

// The cores this process may use: all of them, or under mpirun its share of them among the
// ranks on this machine (spinning workers and busy-polling MPI collapse when oversubscribed).
int cores_for_this_process() {
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  const char* local_ranks = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!local_ranks) local_ranks = std::getenv("MPI_LOCALNRANKS");
  const int sharing = local_ranks ? std::max(1, std::atoi(local_ranks)) : 1;
  return std::max(1, cores / sharing);
}

ThreadPool& thread_pool() {
  if (local_pool) return *local_pool;
  auto& pool = global_pool();
  if (!pool) pool = std::make_unique<ThreadPool>(cores_for_this_process());
  return *pool;
}

void set_num_threads(int n_threads) {
  global_pool() = std::make_unique<ThreadPool>(n_threads > 0 ? n_threads : cores_for_this_process());
}

int default_num_threads() {
  auto& pool = global_pool();
  return pool ? pool->size() : cores_for_this_process();
}

ScopedThreadPool::ScopedThreadPool(int n_threads) : pool_(n_threads), previous_(local_pool) { local_pool = &pool_; }

ScopedThreadPool::~ScopedThreadPool() { local_pool = previous_; }

}  // namespace mlaserve
