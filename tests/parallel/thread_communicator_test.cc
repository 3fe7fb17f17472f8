#include "parallel/thread_communicator.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/error.h"
#include "parallel/shard_plan.h"

namespace mlaserve {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank) on `size` threads and returns each rank's error message ("" if none).
std::vector<std::string> on_ranks(int size, std::chrono::milliseconds timeout,
                                  const std::function<void(Communicator&)>& fn) {
  auto comms = make_thread_communicators(size, timeout);
  std::vector<std::string> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(*comms[size_t(r)]);
      } catch (const Error& e) {
        errors[size_t(r)] = e.what();
        comms[size_t(r)]->abort();
      }
    });
  for (auto& thread : threads) thread.join();
  return errors;
}

TEST(ThreadCommunicator, AllReduceAllGatherBroadcast) {
  std::vector<std::vector<float>> sums(3), gathers(3);
  std::vector<int> broadcasts(3);
  on_ranks(3, 5000ms, [&](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> data = {float(r + 1), float(10 * r), 0.5f};
    comm.all_reduce_sum(data.data(), 3);
    sums[size_t(r)] = data;
    std::vector<float> local = {float(r), float(r * r)}, gathered(6);
    comm.all_gather(local.data(), 2, gathered.data());
    gathers[size_t(r)] = gathered;
    int value = r == 1 ? 42 : -1;
    comm.broadcast(&value, sizeof value, 1);
    broadcasts[size_t(r)] = value;
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sums[size_t(r)], (std::vector<float>{6.0f, 30.0f, 1.5f}));
    EXPECT_EQ(gathers[size_t(r)], (std::vector<float>{0, 0, 1, 1, 2, 4}));
    EXPECT_EQ(broadcasts[size_t(r)], 42);
  }
}

TEST(ThreadCommunicator, MissingRankTimesOutWithAClearError) {
  const auto errors = on_ranks(3, 200ms, [](Communicator& comm) {
    if (comm.rank() == 2) return;  // this rank "dies" before the collective
    float value = 1;
    comm.all_reduce_sum(&value, 1);
  });
  EXPECT_TRUE(errors[2].empty());
  bool timed_out = false;
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(errors[size_t(r)].empty()) << "rank " << r;
    timed_out |= errors[size_t(r)].find("timed out") != std::string::npos;
  }
  EXPECT_TRUE(timed_out);
}

TEST(ThreadCommunicator, FailingRankAbortsTheOthers) {
  const auto start = std::chrono::steady_clock::now();
  const auto errors = on_ranks(2, 60000ms, [](Communicator& comm) {
    if (comm.rank() == 1) fail("rank 1 failed");
    float value = 1;
    comm.all_reduce_sum(&value, 1);
  });
  EXPECT_NE(errors[0].find("aborted"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // woken by the abort, not the timeout
}

TEST(ShardPlan, SplitsEvenlyWithAlignment) {
  EXPECT_EQ(even_split(10, 3, 0).size() + even_split(10, 3, 1).size() + even_split(10, 3, 2).size(), 10);
  EXPECT_EQ(even_split(256, 3, 1, 32).begin, 64);
  EXPECT_EQ(even_split(256, 3, 2, 32).end, 256);
  EXPECT_EQ(heads_of_rank(12, 4, 3).begin, 9);
  EXPECT_THROW(heads_of_rank(12, 5, 0), Error);
}

}  // namespace
}  // namespace mlaserve
