// The adaptive draft length on synthetic costs: where a step's forward costs mostly a fixed
// read of the weights (bandwidth-bound), it drafts at one sequence and drafts less, then
// nothing, as the batch grows; where every token costs the same (compute-bound) it drafts
// nothing but one sequence's probe now and then; and its throughput estimate is what the
// simulated engine measures.
#include "engine/draft_policy.h"

#include <gtest/gtest.h>

#include <random>

namespace mlaserve {
namespace {

struct Costs {
  double fixed_us, per_token_us, draft_fixed_us, draft_per_token_us, acceptance;
};

// Runs `steps` decode steps of `sequences` sequences through the policy; returns the choices.
std::vector<DraftPolicy::Choice> simulate(DraftPolicy& policy, const Costs& costs, int64_t sequences, int steps,
                                          uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution accept(costs.acceptance);
  std::vector<DraftPolicy::Choice> choices;
  for (int step = 0; step < steps; ++step) {
    const DraftPolicy::Choice choice = policy.choose(sequences);
    choices.push_back(choice);
    int64_t drafted = 0;
    for (int64_t s = 0; s < sequences; ++s) {
      const int64_t cap = choice.explore_one && s == 0 ? 4 : choice.length;
      if (cap == 0) continue;
      int64_t accepted = 0;
      while (accepted < cap && accept(rng)) ++accepted;
      policy.record_verification(cap, cap, accepted);
      drafted += cap;
    }
    if (drafted > 0)
      policy.record_drafting(drafted, (costs.draft_fixed_us + costs.draft_per_token_us * double(drafted)) * 1e-6);
    policy.record_forward(sequences + drafted,
                          (costs.fixed_us + costs.per_token_us * double(sequences + drafted)) * 1e-6);
  }
  return choices;
}

TEST(DraftPolicy, BandwidthBoundDraftsLessAsTheBatchGrows) {
  const Costs costs{10000, 20, 200, 30, 0.8};  // a 10 ms weight read, 20 us a token
  std::vector<int64_t> lengths;
  for (int64_t sequences : {1, 8, 64, 512}) {
    DraftPolicy policy(4);
    const auto choices = simulate(policy, costs, sequences, 400, 1);
    lengths.push_back(choices.back().length);
    EXPECT_GE(policy.throughput(choices.back().length, sequences), policy.throughput(0, sequences)) << sequences;
  }
  EXPECT_EQ(lengths[0], 4);  // at one sequence every drafted token pays
  for (size_t i = 1; i < lengths.size(); ++i) EXPECT_LE(lengths[i], lengths[i - 1]);
  EXPECT_EQ(lengths.back(), 0);  // 512 sequences: the step is compute-bound already
}

TEST(DraftPolicy, ComputeBoundDraftsNothingButRareProbes) {
  const Costs costs{50, 100, 30, 20, 0.5};  // every token costs the same: drafts cannot pay
  DraftPolicy policy(4);
  const auto choices = simulate(policy, costs, 1, 3000, 2);
  int probes = 0, drafting = 0;
  for (size_t i = 100; i < choices.size(); ++i) {
    probes += choices[i].explore_one;
    drafting += choices[i].length > 0;
  }
  EXPECT_EQ(drafting, 0);
  EXPECT_GE(probes, 2);   // it keeps looking...
  EXPECT_LE(probes, 10);  // ...ever more rarely (32, 64, ... 1,024 steps apart)
}

TEST(DraftPolicy, ThroughputEstimateMatchesTheSimulatedEngine) {
  const Costs costs{2000, 10, 100, 10, 0.6};
  DraftPolicy policy(4);
  simulate(policy, costs, 4, 300, 3);
  for (int64_t k = 0; k <= 4; ++k) {
    double emitted = 1, p = 1;  // expected tokens a sequence emits drafting k: 1 + 0.6 + 0.36 + ...
    for (int64_t i = 0; i < k; ++i) emitted += (p *= costs.acceptance);
    const double seconds = (costs.fixed_us + costs.per_token_us * 4 * double(1 + k) +
                            (k > 0 ? costs.draft_fixed_us + costs.draft_per_token_us * 4 * double(k) : 0)) *
                           1e-6;
    EXPECT_NEAR(policy.throughput(k, 4), 4 * emitted / seconds, 0.05 * 4 * emitted / seconds) << k;
  }
}

}  // namespace
}  // namespace mlaserve
