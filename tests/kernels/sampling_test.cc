#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace mlaserve {
namespace {

// The filters done the plain way, in double: every id sorted by descending logit (lowest id
// first on ties), softmax at the temperature over the top k, the shortest prefix reaching
// top_p (at least the first), then the first and those at least min_p times it. Returns (id,
// probability) in that order.
std::vector<std::pair<int32_t, double>> reference_candidates(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  size_t kept = p.top_k > 0 ? std::min(ids.size(), size_t(p.top_k)) : ids.size();
  std::vector<double> probs(kept);
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) sum += probs[i] = std::exp((double(logits[ids[i]]) - logits[ids[0]]) / p.temperature);
  for (double& prob : probs) prob /= sum;
  if (p.top_p < 1.0f) {
    double cumulative = 0;
    size_t prefix = 0;
    while (prefix < kept && cumulative < p.top_p) cumulative += probs[prefix++];
    kept = std::max<size_t>(1, prefix);
  }
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < kept; ++i)
    if (i == 0 || probs[i] >= p.min_p * probs[0]) out.emplace_back(ids[i], probs[i]);  // the first always stays
  sum = 0;
  for (const auto& candidate : out) sum += candidate.second;
  for (auto& candidate : out) candidate.second /= sum;
  return out;
}

// Random logits rounded to quarters, so that many tie; vocabularies where the nucleus takes
// the first slice of the partial sort or several.
TEST(Sampling, CandidatesMatchTheFullSortReference) {
  for (int64_t vocab : {1000, 40000}) {
    std::mt19937 gen{uint32_t(vocab)};
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& logit : logits) logit = std::round(normal(gen) * 4.0f) / 4.0f;
    for (float temperature : {0.5f, 1.3f})
      for (int64_t top_k : {0, 7, 500})
        for (float top_p : {1.0f, 0.999f, 0.9f, 0.3f, 0.0f})  // 0: the most likely token alone
          for (float min_p : {0.0f, 0.05f, 1.5f}) {
            const SamplingParams params{temperature, top_k, top_p, min_p};
            SamplingCandidates got;
            sampling_candidates(logits.data(), vocab, params, got);
            const auto want = reference_candidates(logits, params);
            SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " T " << temperature << " top_k " << top_k
                                              << " top_p " << top_p << " min_p " << min_p);
            ASSERT_EQ(got.ids.size(), want.size());
            ASSERT_EQ(got.weights.size(), want.size());
            const bool ordered = top_k > 0 || top_p < 1.0f;  // else in id order
            std::vector<std::pair<int32_t, double>> sorted_want = want;
            if (!ordered) std::sort(sorted_want.begin(), sorted_want.end());
            double total = 0;
            for (float weight : got.weights) total += weight;
            for (size_t i = 0; i < want.size(); ++i) {
              ASSERT_EQ(got.ids[i], sorted_want[i].first) << "candidate " << i;
              ASSERT_NEAR(got.weights[i] / total, sorted_want[i].second, 2e-6 + 1e-5 * sorted_want[i].second);
            }
          }
  }
}

// sample_token draws from the candidates in proportion to their weights: frequencies within
// 5 standard deviations of the reference's probabilities, and nothing outside them.
TEST(Sampling, FrequenciesFollowTheCandidates) {
  std::vector<float> logits(300);
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  for (float& logit : logits) logit = normal(gen);
  const int draws = 40000;
  for (const SamplingParams params : {SamplingParams{0.8f, 0, 1.0f, 0.0f}, SamplingParams{1.0f, 20, 0.8f, 0.0f},
                                      SamplingParams{0.7f, 0, 0.9f, 0.1f}}) {
    std::vector<int> counts(logits.size());
    std::mt19937_64 rng(17);
    for (int i = 0; i < draws; ++i) counts[size_t(sample_token(logits.data(), int64_t(logits.size()), params, rng))]++;
    std::vector<double> want(logits.size(), 0.0);
    for (const auto& [id, prob] : reference_candidates(logits, params)) want[size_t(id)] = prob;
    for (size_t id = 0; id < logits.size(); ++id) {
      const double sigma = std::sqrt(want[id] * (1 - want[id]) / draws);
      EXPECT_NEAR(counts[id] / double(draws), want[id], 5 * sigma + 1e-9) << "token " << id << " top_k " << params.top_k;
    }
  }
}

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
