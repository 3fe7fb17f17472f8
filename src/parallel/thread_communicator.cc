#include "parallel/thread_communicator.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "base/error.h"

namespace mlaserve {
namespace {

// What the ranks share: a reusable barrier with a timeout and one published pointer per rank.
struct Group {
  explicit Group(int n, std::chrono::milliseconds wait) : size(n), timeout(wait), pointers(size_t(n)) {}

  void arrive_and_wait(int rank) {
    std::unique_lock lock(mutex);
    if (aborted) fail("collective aborted: another rank failed");
    const uint64_t my_generation = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      ready.notify_all();
      return;
    }
    const bool passed = ready.wait_for(lock, timeout, [&] { return generation != my_generation || aborted; });
    if (aborted) fail("collective aborted: another rank failed");
    if (!passed) {
      aborted = true;
      ready.notify_all();
      fail("rank {} timed out after {} ms waiting for the other ranks (a rank died or the world size is wrong)", rank,
           timeout.count());
    }
  }

  void abort() {
    std::lock_guard lock(mutex);
    aborted = true;
    ready.notify_all();
  }

  const int size;
  const std::chrono::milliseconds timeout;
  std::mutex mutex;
  std::condition_variable ready;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const void*> pointers;
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_->size; }

  double collective_seconds() const override { return seconds_; }

  void all_reduce_sum(float* data, int64_t count) override {
    const CollectiveTimer timer(seconds_);
    // Publish, wait, sum every rank's buffer in rank order, wait (nobody overwrites a buffer
    // another rank still reads), then write the sum back.
    group_->pointers[size_t(rank_)] = data;
    group_->arrive_and_wait(rank_);
    sum_.assign(size_t(count), 0.0f);
    for (int r = 0; r < group_->size; ++r) {
      const float* other = static_cast<const float*>(group_->pointers[size_t(r)]);
      for (int64_t i = 0; i < count; ++i) sum_[size_t(i)] += other[i];
    }
    group_->arrive_and_wait(rank_);
    std::memcpy(data, sum_.data(), size_t(count) * sizeof(float));
  }

  void all_gather(const float* local, int64_t count, float* gathered) override {
    const CollectiveTimer timer(seconds_);
    group_->pointers[size_t(rank_)] = local;
    group_->arrive_and_wait(rank_);
    for (int r = 0; r < group_->size; ++r)
      std::memcpy(gathered + r * count, group_->pointers[size_t(r)], size_t(count) * sizeof(float));
    group_->arrive_and_wait(rank_);
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    const CollectiveTimer timer(seconds_);
    if (rank_ == root) group_->pointers[size_t(root)] = data;
    group_->arrive_and_wait(rank_);
    if (rank_ != root) std::memcpy(data, group_->pointers[size_t(root)], size_t(bytes));
    group_->arrive_and_wait(rank_);
  }

  void barrier() override { group_->arrive_and_wait(rank_); }
  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
  std::vector<float> sum_;
  double seconds_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int size, std::chrono::milliseconds timeout) {
  MLA_CHECK(size > 0, "a communicator needs at least one rank");
  auto group = std::make_shared<Group>(size, timeout);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadCommunicator>(group, r));
  return ranks;
}

}  // namespace mlaserve
