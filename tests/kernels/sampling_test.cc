#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <vector>

namespace mlaserve {
namespace {

TEST(Sampling, GreedyAndTopK1AreArgmax) {
  const std::vector<float> logits = {0.1f, 3.0f, 2.9f, -1.0f};
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(logits.data(), 4, {}, rng), 1);
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  EXPECT_EQ(sample_token(logits.data(), 4, p, rng), 1);
}

TEST(Sampling, TopPKeepsTheNucleusOnly) {
  const std::vector<float> logits = {0.0f, 10.0f, 9.0f, -5.0f};  // p ~ {0, .73, .27, 0}
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  std::mt19937_64 rng(2);
  int counts[4] = {};
  for (int i = 0; i < 2000; ++i) counts[sample_token(logits.data(), 4, p, rng)]++;
  EXPECT_EQ(counts[0] + counts[3], 0);
  EXPECT_NEAR(counts[1] / 2000.0, 0.731, 0.04);
}

TEST(Sampling, SameSeedSameTokens) {
  std::vector<float> logits(100);
  for (int i = 0; i < 100; ++i) logits[i] = float(i % 7);
  SamplingParams p;
  p.temperature = 1.0f;
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits.data(), 100, p, a), sample_token(logits.data(), 100, p, b));
}

}  // namespace
}  // namespace mlaserve
