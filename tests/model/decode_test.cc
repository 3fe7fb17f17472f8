// Incremental decoding over the latent cache (absorbed MLA, one token a step) must equal
// recomputing the whole sequence with the expanded form.
#include <gtest/gtest.h>

#include "kernels/sampling.h"
#include "model/deepseek_v3.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

TEST(Decode, LatentCacheDecodeEqualsFullRecomputation) {
  testing::TempDir dir;
  nlohmann::json config = model_preset("tiny");
  config["rope_scaling"] = {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 32},
                            {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
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

}  // namespace
}  // namespace mlaserve
