#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace mlaserve {
namespace {

TEST(RequestSampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplingOptions options;
  options.repetition_penalty = 2.0f;
  const std::vector<int32_t> prompt = {1, 2};
  RequestSampler sampler(options, prompt);
  std::vector<float> logits = {0.5f, 3.0f, -1.0f, 2.0f};
  EXPECT_EQ(sampler.sample(logits.data(), 4, nullptr), 3);  // 3.0 -> 1.5 loses to 2.0
  EXPECT_FLOAT_EQ(logits[1], 1.5f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f);
}

TEST(RequestSampler, PresenceAndFrequencyPenaliseOutputTokens) {
  SamplingOptions options;
  options.presence_penalty = 0.5f;
  options.frequency_penalty = 0.25f;
  RequestSampler sampler(options, {});
  std::vector<float> logits = {1.0f, 0.0f};
  EXPECT_EQ(sampler.sample(logits.data(), 2, nullptr), 0);
  logits = {1.0f, 0.0f};
  EXPECT_EQ(sampler.sample(logits.data(), 2, nullptr), 0);  // 1 - 0.75 = 0.25 > 0
  EXPECT_FLOAT_EQ(logits[0], 0.25f);
  logits = {1.0f, 0.1f};
  EXPECT_EQ(sampler.sample(logits.data(), 2, nullptr), 1);  // token 0 seen twice: 1 - 0.5 - 2 * 0.25 = 0 < 0.1
}

TEST(RequestSampler, LogitBiasIsAddedBeforeSamplingAndNotToTheLogprobs) {
  SamplingOptions options;
  options.logit_bias = {{2, 5.0f}, {0, -100.0f}};
  options.logprobs = 0;
  RequestSampler sampler(options, {});
  std::vector<float> logits = {3.0f, 1.0f, -1.0f};
  TokenLogprobs logprobs;
  EXPECT_EQ(sampler.sample(logits.data(), 3, &logprobs), 2);  // -1 + 5 = 4 beats 3 - 100 and 1
  EXPECT_FLOAT_EQ(logits[2], 4.0f);
  const double log_sum = std::log(std::exp(3.0) + std::exp(1.0) + std::exp(-1.0));
  EXPECT_NEAR(logprobs.logprob, -1.0 - log_sum, 1e-6);  // the raw distribution's
}

TEST(RequestSampler, LogprobsAreOfTheRawDistribution) {
  SamplingOptions options;
  options.logprobs = 2;
  options.presence_penalty = 1.0f;
  RequestSampler sampler(options, {});
  std::vector<float> logits = {2.0f, 1.0f, 0.0f};
  TokenLogprobs logprobs;
  EXPECT_EQ(sampler.sample(logits.data(), 3, &logprobs), 0);
  const double log_sum = std::log(std::exp(2.0) + std::exp(1.0) + 1.0);
  EXPECT_NEAR(logprobs.logprob, 2.0 - log_sum, 1e-6);
  ASSERT_EQ(logprobs.top.size(), 2u);
  EXPECT_EQ(logprobs.top[1].first, 1);
  EXPECT_NEAR(logprobs.top[1].second, 1.0 - log_sum, 1e-6);
}

TEST(RequestSampler, SameSeedSameSamples) {
  SamplingOptions options;
  options.params.temperature = 1.0f;
  options.seed = 99;
  RequestSampler a(options, {}), b(options, {});
  for (int i = 0; i < 30; ++i) {
    std::vector<float> la(50), lb(50);
    for (int j = 0; j < 50; ++j) la[j] = lb[j] = float(j % 5);
    EXPECT_EQ(a.sample(la.data(), 50, nullptr), b.sample(lb.data(), 50, nullptr));
  }
}

}  // namespace
}  // namespace mlaserve
