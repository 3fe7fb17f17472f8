#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace mlaserve {

TEST(ThreadPool, CoversEveryItemOnceAlignedToGrain) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 7, 64, 1001}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(
        n,
        [&](int64_t begin, int64_t end, int) {
          EXPECT_TRUE(begin % 8 == 0 || begin == n);
          for (int64_t i = begin; i < end; ++i) seen[i]++;
        },
        8);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, RethrowsWhicheverThreadRanTheChunk) {
  ThreadPool pool(3);
  for (int64_t throwing_chunk_begin : {0, 4, 8}) {
    EXPECT_THROW(pool.parallel_for(12,
                                   [&](int64_t begin, int64_t, int) {
                                     if (begin == throwing_chunk_begin) throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    // The pool runs the next task whole.
    std::atomic<int64_t> sum{0};
    pool.parallel_for(12, [&](int64_t begin, int64_t end, int) { sum += end - begin; });
    EXPECT_EQ(sum, 12);
  }
}

// Tasks back to back, each claimed by whichever threads come: every item once, every time,
// and a worker index below the pool's size.
TEST(ThreadPool, TasksBackToBackCoverEveryItemOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(64);
  for (int task = 0; task < 3000; ++task) {
    const int64_t n = 1 + task % 64;
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int worker) {
      EXPECT_TRUE(worker >= 0 && worker < 4);
      for (int64_t i = begin; i < end; ++i) seen[size_t(i)]++;
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[size_t(i)].exchange(0), 1) << "task " << task << " item " << i;
  }
}

// A worker's chunk slower than the caller's spin: the caller sleeps, and the chunk's end wakes
// it. (The caller's chunk holds on until the worker has claimed the other one.)
TEST(ThreadPool, CallerSleepingOnASlowChunkWakesWhenItEnds) {
  auto* pool = new ThreadPool(2);  // leaked if the test fails: its caller thread stays blocked
  std::atomic<bool> returned{false};
  std::atomic<int64_t> items{0}, slow_chunks{0};
  std::thread caller([&] {
    for (int task = 0; task < 4; ++task) {
      std::atomic<int> started{0};
      pool->parallel_for(2, [&](int64_t begin, int64_t end, int worker) {
        ++started;
        if (worker != 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          ++slow_chunks;
        }
        for (int waited_us = 0; worker == 0 && started < 2 && waited_us < 1000000; waited_us += 100)
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        items += end - begin;
      });
    }
    returned = true;
  });
  for (int waited_ms = 0; waited_ms < 10000 && !returned; waited_ms += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!returned) {
    caller.detach();
    FAIL() << "parallel_for did not return 10 s after its slow chunk ended";
  }
  caller.join();
  EXPECT_EQ(items, 8);
  EXPECT_GT(slow_chunks, 0);  // the worker took part, so the caller did wait for it
  delete pool;
}

}  // namespace mlaserve
