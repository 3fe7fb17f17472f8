// Incremental decoding over the latent cache (absorbed MLA, one token a step) must equal
// recomputing the whole sequence with the expanded form.
#include <gtest/gtest.h>

#include <memory>

#include "kernels/sampling.h"
#include "model/deepseek_v3.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

TEST(Decode, LatentCacheDecodeEqualsFullRecomputation) {
  testing::TempDir dir;
  nlohmann::json config = model_preset("tiny");
  config["rope_scaling"] = {{"type", "yarn"},
                            {"factor", 8},
                            {"original_max_position_embeddings", 32},
                            {"mscale", 1.0},
                            {"mscale_all_dim", 1.0}};
  testing::write_model(dir.path(), config, StorageDType::F32, 5);
  auto model = load_causal_lm(dir.path());
  const int64_t vocab = model->config().vocab_size, steps = 70;
  std::vector<int32_t> tokens = {11, 2200, 31000, 7, 512, 9};
  const int64_t prompt = int64_t(tokens.size());
  SequenceCache cache(model->config(), prompt + steps);
  std::vector<float> step_logits(size_t(steps * vocab));
  model->forward(tokens, 0, cache.view(), false, step_logits.data());
  for (int64_t step = 1; step < steps; ++step) {
    tokens.push_back(argmax(step_logits.data() + (step - 1) * vocab, vocab));
    model->forward(std::span(&tokens.back(), 1), prompt + step - 1, cache.view(), false,
                   step_logits.data() + step * vocab, MlaPath::Absorbed);
  }
  SequenceCache full_cache(model->config(), int64_t(tokens.size()));
  std::vector<float> full(tokens.size() * size_t(vocab));
  model->forward(tokens, 0, full_cache.view(), true, full.data(), MlaPath::Expanded);
  for (int64_t step = 0; step < steps; ++step) {
    const float* want_row = full.data() + (prompt - 1 + step) * vocab;
    std::vector<float> got(step_logits.begin() + step * vocab, step_logits.begin() + (step + 1) * vocab);
    std::vector<float> want(want_row, want_row + vocab);
    ASSERT_TRUE(testing::relative_close(got, want, 1e-4)) << "step " << step;
    ASSERT_EQ(argmax(got.data(), vocab), argmax(want.data(), vocab)) << "step " << step;
  }
}

// Sequences decoding together (one absorbed token each, at different depths, beside a prefill
// chunk on the expanded path) get the logits each gets alone, bit for bit: the batch shares
// kv_b_proj's reads, not its arithmetic.
void expect_batched_absorbed_decode_equals_each_alone(const CausalLM* model) {
  const int64_t vocab = model->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 8}, {900, 3}, {41, 42, 43, 44, 45, 46, 47}};
  const std::vector<int32_t> next = {77, 1234, 9};
  const std::vector<int32_t> chunk = {60, 61, 62};  // a fourth sequence's prefill, expanded
  std::vector<float> alone(4 * size_t(vocab)), together(4 * size_t(vocab));
  std::vector<float> scratch(static_cast<size_t>(vocab));
  std::vector<std::unique_ptr<SequenceCache>> solo, shared;
  for (size_t s = 0; s < prompts.size(); ++s) {
    for (auto* caches : {&solo, &shared}) {
      caches->push_back(std::make_unique<SequenceCache>(model->config(), 16));
      model->forward(prompts[s], 0, caches->back()->view(), false, scratch.data());
    }
    model->forward(std::span(&next[s], 1), int64_t(prompts[s].size()), solo[s]->view(), false, alone.data() + s * vocab,
                   MlaPath::Absorbed);
  }
  SequenceCache chunk_solo(model->config(), 16), chunk_shared(model->config(), 16);
  model->forward(chunk, 0, chunk_solo.view(), false, alone.data() + 3 * vocab, MlaPath::Expanded);
  std::vector<ForwardSequence> batch;
  for (size_t s = 0; s < prompts.size(); ++s)
    batch.push_back({std::span(&next[s], 1), int64_t(prompts[s].size()), shared[s]->view(), MlaPath::Absorbed,
                     ForwardSequence::Logits::Last});
  batch.insert(batch.begin() + 1, {chunk, 0, chunk_shared.view(), MlaPath::Expanded, ForwardSequence::Logits::Last});
  model->forward(batch, together.data());
  const std::vector<size_t> row_of = {0, 2, 3, 1};  // batch order: seq 0, the chunk, seq 1, seq 2
  for (size_t s = 0; s < 4; ++s)
    EXPECT_EQ(std::vector<float>(alone.begin() + s * vocab, alone.begin() + (s + 1) * vocab),
              std::vector<float>(together.begin() + row_of[s] * vocab, together.begin() + (row_of[s] + 1) * vocab))
        << "sequence " << s;
}

TEST(Decode, BatchedAbsorbedDecodeEqualsEachAlone) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::BF16, 6);
  auto model = load_causal_lm(dir.path());
  expect_batched_absorbed_decode_equals_each_alone(model.get());
}

// Repacked, absorbed decode runs kv_b_proj's products from panels of W_UK transposed and W_UV:
// still the same bits together as alone, and the mapped model's logits within fp32 rounding.
TEST(Decode, AbsorbedPanelsDecodeEqualsEachAloneAndTheMappedWeights) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::BF16, 6);
  auto model = load_causal_lm(dir.path());
  ShardSpec spec;
  spec.copy_weights = true;
  auto repacked = model->shard(spec, nullptr);
  expect_batched_absorbed_decode_equals_each_alone(repacked.get());
  const int64_t vocab = model->config().vocab_size;
  const std::vector<int32_t> prompt = {5, 17, 300, 8, 1234};
  std::vector<float> mapped(static_cast<size_t>(vocab)), panels(mapped.size()), scratch(mapped.size());
  for (auto [lm, logits] : {std::pair{model.get(), &mapped}, {repacked.get(), &panels}}) {
    SequenceCache cache(model->config(), 16);
    lm->forward(std::span(prompt).first(4), 0, cache.view(), false, scratch.data());
    lm->forward(std::span(prompt).subspan(4), 4, cache.view(), false, logits->data(), MlaPath::Absorbed);
  }
  EXPECT_TRUE(testing::relative_close(panels, mapped, 1e-4));
}

}  // namespace
}  // namespace mlaserve
