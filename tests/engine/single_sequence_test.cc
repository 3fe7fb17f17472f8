// SingleSequence (logits, perplexity) runs the model's own forward through an executor, and
// the engine's greedy tokens for one request (generate) are the argmax of its logits.
#include "engine/single_sequence.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "engine/engine.h"
#include "engine/thread_ranks.h"
#include "test_util.h"

namespace mlaserve {
namespace {

class SingleSequenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_model(dir_.path(), testing::micro_config(), StorageDType::BF16, 5);
    model_ = load_causal_lm(dir_.path());
    vocab_ = model_->config().vocab_size;
  }
  testing::TempDir dir_;
  std::unique_ptr<CausalLM> model_;
  int64_t vocab_ = 0;
  const std::vector<int32_t> prompt_ = {3, 141, 59, 265, 35, 89};
};

TEST_F(SingleSequenceTest, GivesTheModelsOwnLogits) {
  SingleRankExecutor executor(*model_);
  SingleSequence sequence(executor, 16);
  SequenceCache cache(model_->config(), 16);
  std::vector<float> got(prompt_.size() * size_t(vocab_)), want(got.size());
  sequence.forward(prompt_, 0, true, got.data());
  model_->forward(prompt_, 0, cache.view(), true, want.data());
  EXPECT_EQ(got, want);
  const int32_t next = 7;
  sequence.forward(std::span(&next, 1), int64_t(prompt_.size()), false, got.data());
  model_->forward(std::span(&next, 1), int64_t(prompt_.size()), cache.view(), false, want.data());
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + vocab_, want.begin()));
}

TEST_F(SingleSequenceTest, EngineGreedyIsTheArgmaxOfItsLogits) {
  constexpr int64_t kNewTokens = 12;
  SingleRankExecutor executor(*model_);
  SingleSequence sequence(executor, 32);
  std::vector<int32_t> want;
  std::vector<float> logits(prompt_.size() * size_t(vocab_));
  sequence.forward(prompt_, 0, false, logits.data());
  for (int64_t step = 0; step < kNewTokens; ++step) {
    want.push_back(int32_t(std::max_element(logits.begin(), logits.begin() + vocab_) - logits.begin()));
    sequence.forward(std::span(&want.back(), 1), int64_t(prompt_.size()) + step, false, logits.data());
  }
  auto tokenizer = Tokenizer::load(dir_.path());
  EngineConfig config;
  config.kv_cache_tokens = 32;
  config.cache_dtype = CacheDType::F32;
  config.scheduler.max_num_seqs = 1;
  Engine engine(*model_, *tokenizer, config);
  EngineRequest request;
  request.prompt = prompt_;
  request.max_tokens = kNewTokens;
  request.ignore_eos = true;
  auto handle = engine.submit(request);
  std::vector<int32_t> got;
  for (bool finished = false; !finished;)
    for (const StreamEvent& event : handle->wait(std::chrono::milliseconds(100))) {
      got.insert(got.end(), event.token_ids.begin(), event.token_ids.end());
      finished = finished || event.finished;
    }
  EXPECT_EQ(got, want);
}

TEST_F(SingleSequenceTest, ThreadRanksAllocateTheirPoolsOnce) {
  ExecutorOptions options;
  options.ranks = 2;
  options.threads = 2;
  ThreadRanksExecutor ranks(*model_, options);
  SingleSequence sequence(ranks, 16);
  EXPECT_THROW({ SingleSequence second(ranks, 16); }, Error);
}

}  // namespace
}  // namespace mlaserve
