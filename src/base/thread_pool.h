// A persistent pool of worker threads. parallel_for cuts [0, n) into one contiguous chunk per
// thread, and the calling thread (worker 0) and the workers claim them from a shared cursor:
// a chunk whose thread is not running (another process busy on the machine) is taken by a
// thread that is.
// Dispatch is latency-critical (a decode step issues hundreds of small parallel_for calls), so
// workers spin on the cursor for a short while before sleeping on a condition variable. The
// caller, once every chunk is claimed, spins briefly for the last ones to finish, then sleeps:
// its core goes idle, and the kernel's scheduler can run a descheduled worker there.
#pragma once
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace mlaserve {

class ThreadPool {
 public:
  // fn(begin, end, worker_index) processes items [begin, end): a non-owning reference to the
  // caller's callable. (A std::function allocated on the heap for every lambda capturing more
  // than two pointers — most kernels' do — on each of a decode step's ~100 calls.)
  class RangeFn {
   public:
    template <class Fn>
    requires(std::invocable<Fn&, int64_t, int64_t, int> && !std::same_as<std::decay_t<Fn>, RangeFn>)
        RangeFn(Fn&& fn)  // implicit, so lambdas pass straight to parallel_for
        : object_(const_cast<void*>(static_cast<const void*>(&fn))),
          call_([](void* object, int64_t begin, int64_t end, int worker) {
            (*static_cast<std::remove_reference_t<Fn>*>(object))(begin, end, worker);
          }) {}
    void operator()(int64_t begin, int64_t end, int worker) const { call_(object_, begin, end, worker); }

   private:
    void* object_;
    void (*call_)(void* object, int64_t begin, int64_t end, int worker);
  };

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Runs fn over [0, n) in contiguous chunks, at most one per thread, each on whichever thread
  // claims it first; returns when all finish, rethrowing the first exception a chunk threw.
  // Chunks are aligned to `grain` items (except the last) so kernels can work in whole blocks.
  // Not re-entrant: fn must not call parallel_for.
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

 private:
  void worker_loop(int worker);
  bool wait_for_work(uint64_t seen_generation);  // false when stopping
  void run_chunks(int worker);                   // claims and runs chunks until none is left
  void wait_until_done(int64_t chunks);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards sleeping on work_ready_
  std::condition_variable work_ready_;
  // The task: written by the caller before it publishes the cursor, read by a worker only
  // after it claimed a chunk (so while the caller waits for that chunk).
  const RangeFn* task_ = nullptr;
  int64_t task_items_ = 0, task_grain_ = 1;
  std::exception_ptr task_error_;
  std::mutex error_mutex_;
  // The task's generation, its chunk count and the next chunk to claim, packed so one
  // compare-and-swap claims a chunk of the task that is current (thread_pool.cc).
  std::atomic<uint64_t> cursor_{0};
  std::atomic<int32_t> chunks_done_{0};
  std::atomic<bool> stopping_{false};
};

// The pool kernels use: this thread's own pool while a ScopedThreadPool is alive on it (each
// rank of a thread-parallel model has one), else the process-wide pool sized by
// set_num_threads (default: all cores, or under mpirun this rank's share of them).
ThreadPool& thread_pool();
void set_num_threads(int n_threads);
int default_num_threads();  // what set_num_threads chose (or the core count)

class ScopedThreadPool {
 public:
  explicit ScopedThreadPool(int n_threads);
  ~ScopedThreadPool();
  ScopedThreadPool(const ScopedThreadPool&) = delete;
  ScopedThreadPool& operator=(const ScopedThreadPool&) = delete;

 private:
  ThreadPool pool_;
  ThreadPool* previous_;
};

}  // namespace mlaserve
