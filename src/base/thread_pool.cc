#include "base/thread_pool.h"

#include <algorithm>
#include <exception>
#include <memory>

namespace mlaserve {
namespace {

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
  {
    std::lock_guard lock(mutex_);
    task_ = &fn;
    task_items_ = n;
    task_grain_ = grain;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  work_ready_.notify_all();
  auto [begin, end] = chunk_of(n, grain, n_threads_, 0);
  std::exception_ptr error;
  try {
    if (begin < end) fn(begin, end, 0);
  } catch (...) {
    error = std::current_exception();
  }
  std::unique_lock lock(mutex_);
  work_done_.wait(lock, [this] { return pending_ == 0; });
  task_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int worker) {
  uint64_t seen_generation = 0;
  for (;;) {
    const RangeFn* task;
    int64_t items, grain;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      task = task_;
      items = task_items_;
      grain = task_grain_;
    }
    auto [begin, end] = chunk_of(items, grain, n_threads_, worker);
    if (begin < end) (*task)(begin, end, worker);  // kernels do not throw
    {
      std::lock_guard lock(mutex_);
      --pending_;
    }
    work_done_.notify_all();
  }
}

ThreadPool& thread_pool() {
  auto& pool = global_pool();
  if (!pool) pool = std::make_unique<ThreadPool>(int(std::thread::hardware_concurrency()));
  return *pool;
}

void set_num_threads(int n_threads) {
  global_pool() = std::make_unique<ThreadPool>(n_threads > 0 ? n_threads
                                                             : int(std::thread::hardware_concurrency()));
}

}  // namespace mlaserve
