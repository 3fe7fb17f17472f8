// A draft model proposes its own greedy continuation of each sequence, computed from scratch
// here as the reference: on the first proposal, after the target rejected part of a draft,
// for a sequence that shares another's prompt prefix, and after its cache was evicted.
#include "engine/model_drafter.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "kernels/sampling.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// k greedy tokens after `tokens`, each from a fresh forward over the whole context.
std::vector<int32_t> greedy_continuation(const CausalLM& model, std::vector<int32_t> tokens, int64_t k) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::vector<int32_t> out;
  for (int64_t i = 0; i < k; ++i) {
    SequenceCache cache(model.config(), int64_t(tokens.size()));
    model.forward(tokens, 0, cache.view(), false, logits.data());
    out.push_back(argmax(logits.data(), vocab));
    tokens.push_back(out.back());
  }
  return out;
}

class DraftModel : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_model(dir_.path(), testing::micro_config(), StorageDType::BF16, 5);
    reference_ = load_causal_lm(dir_.path());
  }
  // A drafter over the same checkpoint, its cache of fp32 in blocks of 4 tokens.
  std::unique_ptr<DraftModelDrafter> drafter(int64_t cache_tokens, int64_t max_sequences, int64_t k) {
    auto drafter = std::make_unique<DraftModelDrafter>(load_causal_lm(dir_.path()), dir_.path());
    drafter->prepare({reference_->config().vocab_size, cache_tokens, 4, CacheDType::F32, max_sequences, k});
    return drafter;
  }
  std::vector<std::vector<int32_t>> propose(Drafter& drafter, const std::vector<DraftRequest>& requests) {
    std::vector<std::vector<int32_t>> proposals;
    drafter.propose(requests, proposals);
    EXPECT_EQ(proposals.size(), requests.size());
    return proposals;
  }
  testing::TempDir dir_;
  std::unique_ptr<CausalLM> reference_;
};

std::vector<int32_t> prompt(int length, int salt) {
  std::vector<int32_t> tokens;
  for (int t = 0; t < length; ++t) tokens.push_back(int32_t((t * 37 + salt * 11) % 500));
  return tokens;
}

TEST_F(DraftModel, ProposesItsGreedyContinuationAfterRejectionsAndPrefixSharing) {
  auto draft = drafter(256, 4, 5);
  std::vector<int32_t> first = prompt(10, 0);
  EXPECT_EQ(propose(*draft, {{0, first, 5}})[0], greedy_continuation(*reference_, first, 5));
  // The target kept one drafted token and chose another, and the sequence moved on a token
  // more: the draft's cache rolls back to the rejected token.
  const std::vector<int32_t> drafted = greedy_continuation(*reference_, first, 5);
  first.insert(first.end(), {drafted[0], int32_t((drafted[1] + 1) % 500), drafted[2]});
  // A second sequence shares the first's leading two blocks; a third proposes nothing.
  std::vector<int32_t> second = prompt(8, 0);
  second.insert(second.end(), {7, 8, 9});
  const auto proposals = propose(*draft, {{0, first, 3}, {1, second, 5}, {2, prompt(6, 1), 0}});
  EXPECT_EQ(proposals[0], greedy_continuation(*reference_, first, 3));
  EXPECT_EQ(proposals[1], greedy_continuation(*reference_, second, 5));
  EXPECT_TRUE(proposals[2].empty());
  draft->release(0);
  EXPECT_EQ(propose(*draft, {{1, second, 2}})[0], greedy_continuation(*reference_, second, 2));
}

TEST_F(DraftModel, EvictsSequencesThatAreNotDraftingWhenItsCacheIsFull) {
  auto draft = drafter(16, 1, 2);  // 16 + 1 x (2 + 4) positions: 6 blocks of 4
  const std::vector<int32_t> a = prompt(12, 2), b = prompt(13, 3), long_one = prompt(30, 4);
  EXPECT_EQ(propose(*draft, {{0, a, 2}})[0], greedy_continuation(*reference_, a, 2));
  EXPECT_EQ(propose(*draft, {{1, b, 2}})[0], greedy_continuation(*reference_, b, 2));  // evicts a's
  EXPECT_EQ(propose(*draft, {{0, a, 2}})[0], greedy_continuation(*reference_, a, 2));  // recomputed
  const auto both = propose(*draft, {{0, a, 2}, {2, long_one, 2}});                    // no room for the long one
  EXPECT_EQ(both[0], greedy_continuation(*reference_, a, 2));
  EXPECT_TRUE(both[1].empty());
}

TEST_F(DraftModel, RefusesAnotherVocabularyAndASecondEngine) {
  auto draft = std::make_unique<DraftModelDrafter>(load_causal_lm(dir_.path()), dir_.path());
  try {
    draft->prepare({1000, 64, 4, CacheDType::F32, 2, 4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 512 tokens, the target 1000"), std::string::npos) << e.what();
  }
  draft->prepare({512, 64, 4, CacheDType::F32, 2, 4});
  EXPECT_THROW(draft->prepare({512, 64, 4, CacheDType::F32, 2, 4}), Error);
}

}  // namespace
}  // namespace mlaserve
