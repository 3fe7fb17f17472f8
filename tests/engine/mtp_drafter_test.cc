// The MTP drafter on the trained target (models/kjv and its MTP layer): the target's states
// held until a sequence drafts give the same proposals as states run through the layer as they
// come, through rejections and prefill chunks; a sequence whose earlier rows it never saw gets
// no draft.
#include "engine/mtp_drafter.h"

#include <gtest/gtest.h>

#include "model/causal_lm.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// The target's final normed states for tokens [start, end) of one sequence.
std::vector<float> final_states(const CausalLM& target, SequenceCache& cache, std::span<const int32_t> tokens,
                                int64_t start, int64_t end) {
  const int layers[] = {HiddenStates::kFinalNorm};
  return testing::target_states(target, cache, tokens, start, end, layers);
}

TEST(MtpDrafter, HeldStatesDraftAsStatesRunAsTheyComeThroughRejections) {
  const auto target = load_causal_lm(testing::committed_model("kjv"));
  const DraftBudget budget{4096, 512, 16, CacheDType::F32, 4, 4};
  MtpDrafter lazy(next_token_module(*target));
  MtpDrafter eager(next_token_module(*target), 0);
  lazy.prepare(budget);
  eager.prepare(budget);
  SequenceCache cache(target->config(), 400);
  std::vector<int32_t> tokens = {4091, 60, 273, 286, 370, 11, 2330, 308, 262, 1136};
  // The prompt in two chunks, then each round: the first draft kept, the rest replaced; the
  // lazy drafter is asked for a draft only every third round.
  const ObservedChunk first{7, std::span(tokens).first(7), 0, 6, nullptr};
  auto states = final_states(*target, cache, tokens, 0, 6);
  const ObservedChunk prefill{first.sequence_id, first.tokens, 0, 6, states.data()};
  lazy.observe(std::span(&prefill, 1));
  eager.observe(std::span(&prefill, 1));
  int64_t computed = 6;
  int64_t drafted = 0;
  for (int round = 0; round < 12; ++round) {
    const int64_t end = int64_t(tokens.size()) - (round == 0 ? 0 : 1);
    states = final_states(*target, cache, tokens, computed, end);
    if (round == 0) tokens.push_back(1);  // the prompt's first output token
    const ObservedChunk chunk{7, tokens, computed, end - computed, states.data()};
    lazy.observe(std::span(&chunk, 1));
    eager.observe(std::span(&chunk, 1));
    computed = end;
    const DraftRequest request{7, tokens, 4};
    std::vector<std::vector<int32_t>> from_lazy, from_eager;
    eager.propose(std::span(&request, 1), from_eager);
    ASSERT_EQ(from_eager[0].size(), 4u) << "round " << round;
    if (round % 3 == 2) {
      lazy.propose(std::span(&request, 1), from_lazy);
      ASSERT_EQ(from_lazy, from_eager) << "round " << round;
      drafted += int64_t(from_lazy[0].size());
    }
    tokens.push_back(from_eager[0][0]);
    tokens.push_back((from_eager[0][1] + 1) % 4000);  // a rejection: the target's own token differs
  }
  EXPECT_EQ(drafted, 16);
  // A sequence first seen at position 4 (a target prefix-cache hit on rows this drafter never
  // computed) drafts nothing.
  states = final_states(*target, cache, tokens, 4, 6);
  const std::span<const int32_t> seen = std::span(tokens).first(7);
  const ObservedChunk late{8, seen, 4, 2, states.data()};
  lazy.observe(std::span(&late, 1));
  const DraftRequest request{8, seen, 4};
  std::vector<std::vector<int32_t>> proposals;
  lazy.propose(std::span(&request, 1), proposals);
  EXPECT_TRUE(proposals[0].empty());
}

}  // namespace
}  // namespace mlaserve
