#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
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

TEST(ThreadPool, RethrowsFromCallingThread) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(10, [](int64_t begin, int64_t, int) {
    if (begin == 0) throw std::runtime_error("boom");
  }), std::runtime_error);
}

}  // namespace mlaserve
