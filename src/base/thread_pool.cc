#include "base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>

namespace mlaserve {
namespace {

// About half a millisecond of spinning before a worker sleeps (a pause takes tens of ns on
// Zen cores): longer than the gap between the kernels of a decode step, far shorter
// than the gap between requests.
constexpr int kSpinIterations = 20000;

// Worker w's share of n items, rounded to whole grains.
std::pair<int64_t, int64_t> chunk_of(int64_t n, int64_t grain, int workers, int w) {
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t begin = grains * w / workers * grain;
  const int64_t end = grains * (w + 1) / workers * grain;
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
  task_ = &fn;
  task_items_ = n;
  task_grain_ = grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);  // publishes the task to sleeping workers
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_ready_.notify_all();
  auto [begin, end] = chunk_of(n, grain, n_threads_, 0);
  std::exception_ptr error;
  try {
    if (begin < end) fn(begin, end, 0);
  } catch (...) {
    error = std::current_exception();
  }
  while (pending_.load(std::memory_order_acquire) != 0) _mm_pause();
  task_ = nullptr;
  if (error) std::rethrow_exception(error);
}

bool ThreadPool::wait_for_work(uint64_t seen_generation) {
  for (int spin = 0; spin < kSpinIterations; ++spin) {
    if (generation_.load(std::memory_order_acquire) != seen_generation) return true;
    if (stopping_.load(std::memory_order_relaxed)) return false;
    _mm_pause();
  }
  std::unique_lock lock(mutex_);
  work_ready_.wait(lock, [&] { return stopping_ || generation_.load(std::memory_order_acquire) != seen_generation; });
  return !stopping_;
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen_generation = 0;
  while (wait_for_work(seen_generation)) {
    seen_generation = generation_.load(std::memory_order_acquire);
    auto [begin, end] = chunk_of(task_items_, task_grain_, n_threads_, worker);
    if (begin < end) (*task_)(begin, end, worker);  // kernels do not throw
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
