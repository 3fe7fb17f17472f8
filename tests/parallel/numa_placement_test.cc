// Thread ranks placed with --numa bind (what auto does on a machine with several nodes): each
// rank's thread runs on its share of the CPUs, its weight copies and latent cache carry its
// node's policy, and the logits are the bits of the unplaced ranks.
#include <gtest/gtest.h>
#include <numaif.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "base/numa.h"
#include "engine/single_sequence.h"
#include "engine/thread_ranks.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

// Cpus_allowed_list of every thread of this process.
std::set<std::string> thread_cpu_lists() {
  std::set<std::string> lists;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) lists.insert(line.substr(line.find_first_not_of(" \t", 18)));
  }
  return lists;
}

int policy_at(const void* address) {
  int mode = -1;
  unsigned long mask[16] = {};
  EXPECT_EQ(get_mempolicy(&mode, mask, 1024, const_cast<void*>(address), MPOL_F_ADDR), 0);
  return mode;
}

TEST(NumaPlacement, BoundThreadRanksGiveTheUnboundRanksLogits) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::BF16, 3);
  auto model = load_causal_lm(dir.path());
  const std::vector<int32_t> prompt = {5, 17, 300, 8, 1234};
  const int64_t vocab = model->config().vocab_size;
  std::vector<float> unbound(static_cast<size_t>(vocab)), bound(unbound.size());
  for (NumaMode mode : {NumaMode::Off, NumaMode::Bind}) {
    ExecutorOptions options;
    options.ranks = 2;
    options.threads = 2;
    options.copy_weights = true;
    options.numa = mode;
    ThreadRanksExecutor ranks(*model, options);
    const int64_t capacity = 1024;
    SingleSequence sequence(ranks, capacity);
    sequence.forward(prompt, 0, false, (mode == NumaMode::Off ? unbound : bound).data());
    if (mode == NumaMode::Off) {
      EXPECT_FALSE(ranks.placement(1).placed());
      continue;
    }
    const std::set<std::string> lists = thread_cpu_lists();
    for (int rank = 0; rank < 2; ++rank) {
      const RankPlacement& placement = ranks.placement(rank);
      ASSERT_TRUE(placement.placed());
      EXPECT_TRUE(lists.count(format_cpu_list(placement.cpus))) << "no thread on " << placement.describe();
      const size_t pool_bytes = sequence_cache_bytes(model->config(), capacity, CacheDType::F32);
      EXPECT_EQ(policy_at(static_cast<uint8_t*>(ranks.pool(rank)) + pool_bytes / 2), MPOL_PREFERRED) << rank;
    }
  }
  EXPECT_EQ(bound, unbound);
}

}  // namespace
}  // namespace mlaserve
