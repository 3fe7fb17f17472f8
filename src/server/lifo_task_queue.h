// cpp-httplib's task queue (one job a connection) on a fixed set of threads, where the thread
// that went idle last takes the next job. With httplib's own pool every thread takes jobs in
// turn, so over hours each of the 128 threads fills its allocator cache (glibc's tcache, up
// to ~200 KiB a thread, which malloc_trim does not release) and the process's memory creeps
// up; here only as many threads work as connections were ever open at once.
#pragma once
#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mlaserve {

class LifoTaskQueue : public httplib::TaskQueue {
 public:
  // Returns once every thread waits for work.
  explicit LifoTaskQueue(size_t n_threads);
  ~LifoTaskQueue() override;
  void enqueue(std::function<void()> job) override;
  // Runs the jobs already queued, then joins the threads.
  void shutdown() override;
  size_t idle_threads();

 private:
  struct Worker {
    std::condition_variable wake;
    bool woken = false;
  };
  void work(Worker& self);

  std::mutex mutex_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Worker*> idle_;  // the idle workers, the one idle last at the back
  std::condition_variable all_idle_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mlaserve
