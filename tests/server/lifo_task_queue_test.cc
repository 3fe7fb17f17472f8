// The HTTP server's task queue: the thread idle last takes the next job, jobs can run at once
// on as many threads as there are, and shutdown runs what is queued.
#include "server/lifo_task_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <set>

namespace mlaserve {
namespace {

TEST(LifoTaskQueue, OneJobAtATimeRunsOnOneThread) {
  LifoTaskQueue queue(8);
  std::set<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    std::promise<std::thread::id> ran;
    queue.enqueue([&] { ran.set_value(std::this_thread::get_id()); });
    threads.insert(ran.get_future().get());
    while (queue.idle_threads() < 8) std::this_thread::yield();  // the worker is back on the idle stack
  }
  EXPECT_EQ(threads.size(), 1u);
  queue.shutdown();
}

TEST(LifoTaskQueue, JobsRunAtOnceOnEveryThread) {
  constexpr int kThreads = 4;
  LifoTaskQueue queue(kThreads);
  std::atomic<int> started{0};
  std::mutex mutex;
  std::set<std::thread::id> threads;
  for (int i = 0; i < kThreads; ++i)
    queue.enqueue([&] {
      {
        std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
      }
      ++started;
      while (started.load() < kThreads) std::this_thread::yield();  // each waits for all the others
    });
  queue.shutdown();
  EXPECT_EQ(started.load(), kThreads);
  EXPECT_EQ(threads.size(), size_t(kThreads));
}

TEST(LifoTaskQueue, ShutdownRunsTheQueuedJobs) {
  LifoTaskQueue queue(2);
  std::atomic<int> done{0};
  for (int i = 0; i < 200; ++i)
    queue.enqueue([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      ++done;
    });
  queue.shutdown();
  EXPECT_EQ(done.load(), 200);
  queue.shutdown();  // again: nothing left to do
}

}  // namespace
}  // namespace mlaserve
