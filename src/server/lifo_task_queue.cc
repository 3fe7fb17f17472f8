#include "server/lifo_task_queue.h"

namespace mlaserve {

LifoTaskQueue::LifoTaskQueue(size_t n_threads) {
  for (size_t i = 0; i < n_threads; ++i) workers_.push_back(std::make_unique<Worker>());
  for (auto& worker : workers_) threads_.emplace_back([this, &self = *worker] { work(self); });
  std::unique_lock lock(mutex_);  // returns with every thread idle, in a known order
  all_idle_.wait(lock, [&] { return idle_.size() == workers_.size(); });
}

LifoTaskQueue::~LifoTaskQueue() { shutdown(); }

void LifoTaskQueue::enqueue(std::function<void()> job) {
  std::lock_guard lock(mutex_);
  jobs_.push_back(std::move(job));
  if (idle_.empty()) return;  // a busy worker takes it when it finishes
  Worker* next = idle_.back();
  idle_.pop_back();
  next->woken = true;
  next->wake.notify_one();
}

size_t LifoTaskQueue::idle_threads() {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

void LifoTaskQueue::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& worker : workers_) worker->wake.notify_one();
  }
  for (auto& thread : threads_) thread.join();
}

// A worker leaves the idle stack only when enqueue wakes it (or at shutdown); woken, it may
// find the job taken by a worker that finished meanwhile, and goes back on top of the stack.
void LifoTaskQueue::work(Worker& self) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      while (jobs_.empty() && !stopping_) {
        self.woken = false;
        idle_.push_back(&self);
        if (idle_.size() == workers_.size()) all_idle_.notify_one();
        self.wake.wait(lock, [&] { return self.woken || stopping_; });
        if (!self.woken) std::erase(idle_, &self);  // stopping
      }
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace mlaserve
