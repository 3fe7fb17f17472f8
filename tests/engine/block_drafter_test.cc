// The block drafter on the trained target and block draft (models/kjv, models/kjv-dflash): rows
// held back until a sequence drafts give the same proposals as rows projected as they come,
// through rejections; a sequence whose earlier rows it never saw gets no draft.
#include "engine/block_drafter.h"

#include <gtest/gtest.h>

#include "model/causal_lm.h"
#include "test_util.h"

namespace mlaserve {
namespace {

TEST(BlockDrafter, HeldRowsDraftAsProjectedOnesThroughRejections) {
  const auto target = load_causal_lm(testing::committed_model("kjv"));
  const DraftBudget budget{4096, 512, 16, CacheDType::F32, 4, 7};
  BlockDrafter lazy(std::make_unique<BlockDraftModel>(testing::committed_model("kjv-dflash"), *target), "lazy", true);
  BlockDrafter eager(std::make_unique<BlockDraftModel>(testing::committed_model("kjv-dflash"), *target), "eager", true,
                     0);
  lazy.prepare(budget);
  eager.prepare(budget);
  const std::vector<int> layers = lazy.hidden_state_layers();
  SequenceCache cache(target->config(), 400);
  // A verse's start, then each round: the draft's first token kept, the rest replaced.
  std::vector<int32_t> tokens = {4091, 60, 273, 286, 370, 11, 2330, 308, 262, 1136};
  int64_t computed = 0;
  int64_t drafted = 0;
  for (int round = 0; round < 12; ++round) {
    const int64_t end = int64_t(tokens.size()) - (round == 0 ? 0 : 1);
    const auto states = testing::target_states(*target, cache, tokens, computed, end, layers);
    if (round == 0) tokens.push_back(1);  // the prompt's first output token
    const ObservedChunk chunk{7, tokens, computed, end - computed, states.data()};
    lazy.observe(std::span(&chunk, 1));
    eager.observe(std::span(&chunk, 1));
    computed = end;
    const DraftRequest request{7, tokens, 5};
    std::vector<std::vector<int32_t>> from_lazy, from_eager;
    lazy.propose(std::span(&request, 1), from_lazy);
    eager.propose(std::span(&request, 1), from_eager);
    ASSERT_EQ(from_lazy, from_eager) << "round " << round;
    ASSERT_EQ(from_lazy[0].size(), 5u) << "round " << round;
    drafted += int64_t(from_lazy[0].size());
    tokens.push_back(from_lazy[0][0]);
    tokens.push_back((from_lazy[0][1] + 1) % 4000);  // a rejection: the target's own token differs
  }
  EXPECT_EQ(drafted, 60);
  // A sequence first seen at position 4 (a target prefix-cache hit on rows this drafter never
  // computed) drafts nothing.
  const auto states = testing::target_states(*target, cache, tokens, 4, 6, layers);
  const std::span<const int32_t> seen = std::span(tokens).first(7);
  const ObservedChunk late{8, seen, 4, 2, states.data()};
  lazy.observe(std::span(&late, 1));
  const DraftRequest request{8, seen, 5};
  std::vector<std::vector<int32_t>> proposals;
  lazy.propose(std::span(&request, 1), proposals);
  EXPECT_TRUE(proposals[0].empty());
}

}  // namespace
}  // namespace mlaserve
