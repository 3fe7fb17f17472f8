#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace mlaserve {

TEST(ThreadPool, CoversEveryItemOnceAlignedToGrain) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 7, 64, 1001}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
      EXPECT_TRUE(begin % 8 == 0 || begin == n);
      for (int64_t i = begin; i < end; ++i) seen[i]++;
    }, 8);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "n=" << n << " i=" << i;
  }
}

TEST(ThreadPool, RethrowsWhicheverThreadRanTheChunk) {
  ThreadPool pool(3);
  for (int64_t throwing_chunk_begin : {0, 4, 8}) {
    EXPECT_THROW(pool.parallel_for(12, [&](int64_t begin, int64_t, int) {
      if (begin == throwing_chunk_begin) throw std::runtime_error("boom");
    }), std::runtime_error);
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

}  // namespace mlaserve
