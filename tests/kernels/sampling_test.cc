#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

namespace mlaserve {
namespace {

// The filters done the plain way, in double: every id sorted by descending logit (lowest id
// first on ties), softmax at the temperature over the top k, the shortest prefix reaching
// top_p (at least the first), then the first and those at least min_p times it. Returns (id,
// probability) in that order.
std::vector<std::pair<int32_t, double>> reference_candidates(const std::vector<float>& logits,
                                                             const SamplingParams& p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  size_t kept = p.top_k > 0 ? std::min(ids.size(), size_t(p.top_k)) : ids.size();
  std::vector<double> probs(kept);
  double sum = 0;
  for (size_t i = 0; i < kept; ++i)
    sum += probs[i] = std::exp((double(logits[ids[i]]) - logits[ids[0]]) / p.temperature);
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
      EXPECT_NEAR(counts[id] / double(draws), want[id], 5 * sigma + 1e-9)
          << "token " << id << " top_k " << params.top_k;
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
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(sample_token(logits.data(), 100, p, a), sample_token(logits.data(), 100, p, b));
}

// Chain speculative sampling keeps the target's distribution: the first emitted token of
// 20,000 seeded chains of 2 drafts (drawn from a draft q far from the target p) passes a
// chi-square test against p at the 1% level (5 degrees of freedom: 15.09), and a wrong
// acceptance rule (accept with probability p(d), ignoring q) fails the same test.
using FirstToken = std::function<int32_t(const std::vector<float>& q, const std::vector<float>& p, std::mt19937_64&)>;

double chi_square_of_first_tokens(const FirstToken& first_token) {
  const std::vector<float> p = {0.35f, 0.25f, 0.15f, 0.12f, 0.08f, 0.05f}, q = {0.05f, 0.1f, 0.4f, 0.05f, 0.3f, 0.1f};
  constexpr int kTrials = 20000;
  std::mt19937_64 rng(7);
  std::vector<int> counts(p.size());
  for (int trial = 0; trial < kTrials; ++trial) ++counts[size_t(first_token(q, p, rng))];
  double chi_square = 0.0;
  for (size_t v = 0; v < p.size(); ++v) {
    const double expected = kTrials * double(p[v]);
    chi_square += (counts[v] - expected) * (counts[v] - expected) / expected;
  }
  return chi_square;
}

int32_t draw_from(const std::vector<float>& probs, std::mt19937_64& rng) {
  const float u = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
  int32_t id = 0;
  sampling_from_probs(probs.data(), 1, int64_t(probs.size()), &u, &id);
  return id;
}

TEST(ChainSpeculativeSampling, KeepsTheTargetDistribution) {
  constexpr double kCritical = 15.09;  // chi-square, 5 degrees of freedom, p = 0.01
  const double right = chi_square_of_first_tokens([](const auto& q, const auto& p, std::mt19937_64& rng) {
    const int64_t vocab = int64_t(p.size());
    std::vector<float> drafts_q(q), targets(p);
    drafts_q.insert(drafts_q.end(), q.begin(), q.end());  // 2 drafts, each drawn from q
    targets.insert(targets.end(), p.begin(), p.end());
    targets.insert(targets.end(), p.begin(), p.end());
    const int32_t drafts[2] = {draw_from(q, rng), draw_from(q, rng)};
    float uniforms[3];
    for (float& u : uniforms) u = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    int32_t out[3], accepted, emitted;
    chain_speculative_sampling(drafts_q.data(), drafts, targets.data(), 1, 2, vocab, uniforms, out, &accepted,
                               &emitted);
    return out[0];
  });
  const double wrong = chi_square_of_first_tokens([](const auto& q, const auto& p, std::mt19937_64& rng) {
    const int32_t draft = draw_from(q, rng);
    const bool accept = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng) < p[size_t(draft)];
    return accept ? draft : draw_from(p, rng);
  });
  EXPECT_LT(right, kCritical);
  EXPECT_GT(wrong, kCritical);
}

}  // namespace
}  // namespace mlaserve
