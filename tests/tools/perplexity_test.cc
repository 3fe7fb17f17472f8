// perplexity(): llama-perplexity's chunking and scoring, against sums worked out by hand.
#include "tools/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "base/error.h"

namespace mlaserve {
namespace {

constexpr int64_t kVocab = 5;

// Logits that give token (id + 1) % vocab probability p after each id (the rest share 1 - p).
void next_token_logits(std::span<const int32_t> chunk, float* logits, double p) {
  const double rest = (1.0 - p) / (kVocab - 1);
  for (size_t i = 0; i < chunk.size(); ++i)
    for (int64_t v = 0; v < kVocab; ++v)
      logits[i * kVocab + size_t(v)] = float(std::log(v == (chunk[i] + 1) % kVocab ? p : rest));
}

TEST(Perplexity, ScoresTheSecondHalfOfEachChunkAfterBos) {
  // 0 1 2 3 4 0 1 2 | 3 4 0 1 2 3 4 0 | 1 2 (a partial chunk: dropped); ctx 8, BOS = 4.
  std::vector<int32_t> ids(18);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i % kVocab);
  std::vector<std::vector<int32_t>> seen;
  const PerplexityResult result = perplexity(ids, 4, 8, 0, kVocab, [&](std::span<const int32_t> chunk, float* logits) {
    seen.emplace_back(chunk.begin(), chunk.end());
    next_token_logits(chunk, logits, 0.5);
  });
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], (std::vector<int32_t>{4, 1, 2, 3, 4, 0, 1, 2}));  // first token replaced by BOS
  EXPECT_EQ(seen[1], (std::vector<int32_t>{4, 4, 0, 1, 2, 3, 4, 0}));
  // Positions 4..6 of each chunk predict its tokens 5..7, each by the rule (p 0.5): 6 scored
  // tokens, each -log 0.5.
  EXPECT_EQ(result.chunks, 2);
  EXPECT_EQ(result.scored_tokens, 6);
  EXPECT_NEAR(result.mean_nll, std::log(2.0), 1e-6);
  EXPECT_NEAR(result.perplexity, 2.0, 1e-5);
  EXPECT_NEAR(result.nll_stderr, 0.0, 1e-6);
}

TEST(Perplexity, MissesCountAtTheRestsProbability) {
  std::vector<int32_t> ids = {0, 1, 2, 3, 0, 0, 0, 0};  // ctx 8, no BOS: positions 4..6 predict 0, 0, 0
  const PerplexityResult result =
      perplexity(ids, std::nullopt, 8, 0, kVocab,
                 [](std::span<const int32_t> chunk, float* logits) { next_token_logits(chunk, logits, 0.6); });
  // After 0 the rule says 1 (p 0.6): each of the 3 scored tokens has 0.1.
  EXPECT_NEAR(result.perplexity, 10.0, 1e-4);
}

TEST(Perplexity, ChunkLimitAndTooShortText) {
  std::vector<int32_t> ids(40, 1);
  int calls = 0;
  const auto forward = [&](std::span<const int32_t> chunk, float* logits) {
    ++calls;
    next_token_logits(chunk, logits, 0.5);
  };
  EXPECT_EQ(perplexity(ids, std::nullopt, 8, 2, kVocab, forward).chunks, 2);
  EXPECT_EQ(calls, 2);
  EXPECT_THROW(perplexity(std::span(ids).first(7), std::nullopt, 8, 0, kVocab, forward), Error);
  EXPECT_THROW(perplexity(ids, std::nullopt, 2, 0, kVocab, forward), Error);
}

}  // namespace
}  // namespace mlaserve
