#include "kernels/moe_router.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mlaserve {
namespace {

RouterParams params(int64_t experts, int64_t groups, int64_t keep_groups, int64_t top_k) {
  RouterParams p;
  p.n_experts = experts;
  p.n_group = groups;
  p.topk_group = keep_groups;
  p.top_k = top_k;
  p.routed_scaling_factor = 2.5f;
  return p;
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

TEST(MoeRouter, BiasChoosesButDoesNotWeigh) {
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 5.0f};  // expert 3 wins the choice
  int32_t ids[2];
  float weights[2];
  route_token(logits, bias, params(4, 1, 1, 2), ids, weights);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  const float sum = sigmoid(-1.0f) + sigmoid(2.0f);
  EXPECT_FLOAT_EQ(weights[0], sigmoid(-1.0f) / sum * 2.5f);  // unbiased score, renormalised, scaled
  EXPECT_FLOAT_EQ(weights[1], sigmoid(2.0f) / sum * 2.5f);
}

TEST(MoeRouter, GroupScoreIsSumOfTopTwo) {
  // Group 0 = {0,1,2}: one strong expert. Group 1 = {3,4,5}: two good ones, a larger top-2
  // sum. Keeping one group must keep group 1 although expert 0 is the single best.
  const float logits[6] = {4.0f, -4.0f, -4.0f, 2.0f, 2.0f, -4.0f};
  const float bias[6] = {0, 0, 0, 0, 0, 0};
  int32_t ids[2];
  float weights[2];
  route_token(logits, bias, params(6, 2, 1, 2), ids, weights);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 4);
}

TEST(MoeRouter, NoRenormalisationKeepsRawScores) {
  RouterParams p = params(4, 1, 1, 2);
  p.norm_topk_prob = false;
  p.routed_scaling_factor = 1.0f;
  const float logits[4] = {0.5f, 1.5f, -0.5f, 0.0f};
  int32_t ids[2];
  float weights[2];
  route_token(logits, nullptr, p, ids, weights);
  EXPECT_EQ(ids[0], 1);
  EXPECT_FLOAT_EQ(weights[0], sigmoid(1.5f));
}

}  // namespace
}  // namespace mlaserve
