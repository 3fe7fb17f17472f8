// The prefill's MLA form: mla_prefill_path's choice (absorbed for few new tokens after many
// cached positions, expanded otherwise) and mla_forward running the form it chose.
#include <gtest/gtest.h>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels/mla_decode.h"
#include "model/deepseek_v3.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

// DeepSeek-V3's attention at 8-way tensor parallelism (128 heads / 8), and the mini preset's.
const MlaShape kDeepseekV3Rank{7168, 16, 512, 128, 64, 128, 1e-6, 0.0f};
const MlaShape kMini{1024, 16, 256, 64, 32, 64, 1e-6, 0.0f};

// A bf16 cache runs the latent kernel on AMX tiles where the host has them, an fp32 one never.
constexpr CacheDType kCaches[] = {CacheDType::BF16, CacheDType::F32};

TEST(MlaPrefillPath, OneTokenIsAbsorbedAndAFreshPromptExpanded) {
  for (const MlaShape& shape : {kDeepseekV3Rank, kMini})
    for (CacheDType cache : kCaches) {
      for (int64_t start : {0, 7, 4096}) EXPECT_EQ(mla_prefill_path(shape, 1, start, cache), MlaPath::Absorbed);
      for (int64_t tokens : {2, 3, 16, 100, 512, 4096})
        EXPECT_EQ(mla_prefill_path(shape, tokens, 0, cache), MlaPath::Expanded) << tokens;
    }
}

// bench-model on this project's machines (docs/performance.md): 4 or 16 tokens after 2048 cached
// ran 2.4-5.7x faster absorbed, 512 tokens after 512 cached 16-21% faster expanded.
TEST(MlaPrefillPath, ShortChunksAfterLongPrefixesAreAbsorbed) {
  for (const MlaShape& shape : {kDeepseekV3Rank, kMini})
    for (CacheDType cache : kCaches) {
      EXPECT_EQ(mla_prefill_path(shape, 4, 2048, cache), MlaPath::Absorbed);
      EXPECT_EQ(mla_prefill_path(shape, 16, 2048, cache), MlaPath::Absorbed);
      EXPECT_EQ(mla_prefill_path(shape, 20, 1000, cache), MlaPath::Absorbed);
      EXPECT_EQ(mla_prefill_path(shape, 512, 512, cache), MlaPath::Expanded);
      EXPECT_EQ(mla_prefill_path(shape, 2048, 2048, cache), MlaPath::Expanded);
    }
}

// Without the tile unit a (query, position) pair of the latent kernel costs far more, so a long
// chunk over a long cache stays expanded; on the tiles it runs absorbed (docs/kernels.md).
TEST(MlaPrefillPath, LongChunksStayExpandedOffTheTiles) {
  EXPECT_EQ(mla_prefill_path(kMini, 256, 2048, CacheDType::F32), MlaPath::Expanded);
  EXPECT_EQ(mla_prefill_path(kMini, 128, 512, CacheDType::F32), MlaPath::Expanded);
  if (mla_absorbed_on_tiles(kMini.n_heads, kMini.kv_lora_rank, kMini.qk_rope_head_dim, CacheDType::BF16,
                            kernel_config()))
    EXPECT_EQ(mla_prefill_path(kMini, 256, 2048, CacheDType::BF16), MlaPath::Absorbed);
  else
    EXPECT_EQ(mla_prefill_path(kMini, 256, 2048, CacheDType::BF16), MlaPath::Expanded);
}

// Along either axis the choice switches once at most: more new tokens only favour the
// expansion; more cached positions favour whichever form's cost grows slower with them (the
// expansion's per position, or the latent kernel's per query and position).
TEST(MlaPrefillPath, SwitchesOnceAlongEitherAxis) {
  for (const MlaShape& shape : {kDeepseekV3Rank, kMini})
    for (CacheDType cache : kCaches) {
      for (int64_t tokens : {2, 9, 64, 300}) {
        int switches = 0;
        for (int64_t start = 1; start < 20000; ++start)
          switches +=
              mla_prefill_path(shape, tokens, start, cache) != mla_prefill_path(shape, tokens, start - 1, cache);
        EXPECT_LE(switches, 1) << tokens << " tokens";
      }
      for (int64_t start : {64, 1000, 8000}) {
        int switches = 0;
        for (int64_t tokens = 3; tokens < 20000; ++tokens)
          switches +=
              mla_prefill_path(shape, tokens, start, cache) != mla_prefill_path(shape, tokens - 1, start, cache);
        EXPECT_LE(switches, 1) << start << " cached";
      }
    }
}

TEST(MlaPrefillPath, NamesRoundTripAndUnknownOnesAreRefused) {
  for (MlaPath path : {MlaPath::Auto, MlaPath::Expanded, MlaPath::Absorbed})
    EXPECT_EQ(mla_path_from_name(mla_path_name(path)), path);
  try {
    mla_path_from_name("flash");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'flash'"), std::string::npos) << e.what();
  }
}

// Auto gives the bits of the form mla_prefill_path names for the chunk, and the two forms agree
// within fp32 rounding (an f32 model and cache: every product exact in fp32).
TEST(MlaPrefillPath, AutoRunsTheChosenForm) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::F32, 9);
  auto model = load_causal_lm(dir.path());
  const ModelConfig& config = model->config();
  const MlaShape tiny{config.hidden_size,
                      config.num_attention_heads,
                      config.kv_lora_rank,
                      config.qk_nope_head_dim,
                      config.qk_rope_head_dim,
                      config.v_head_dim,
                      1e-6,
                      0.0f};
  std::vector<int32_t> tokens(60);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % size_t(config.vocab_size));
  const int64_t vocab = config.vocab_size, chunk = 4;
  for (int64_t start : {int64_t(0), int64_t(56)}) {
    const MlaPath chosen = start == 0 ? MlaPath::Expanded : MlaPath::Absorbed;
    const int64_t n = start == 0 ? int64_t(tokens.size()) : chunk;
    ASSERT_EQ(mla_prefill_path(tiny, n, start, CacheDType::F32), chosen);
    std::vector<std::vector<float>> logits;
    for (MlaPath path : {MlaPath::Auto, chosen, chosen == MlaPath::Absorbed ? MlaPath::Expanded : MlaPath::Absorbed}) {
      SequenceCache cache(config, int64_t(tokens.size()), CacheDType::F32);
      std::vector<float> scratch(static_cast<size_t>(vocab));
      if (start > 0) model->forward(std::span(tokens).first(size_t(start)), 0, cache.view(), false, scratch.data());
      logits.emplace_back(size_t(n * vocab));
      model->forward(std::span(tokens).subspan(size_t(start), size_t(n)), start, cache.view(), true,
                     logits.back().data(), path);
    }
    EXPECT_EQ(logits[0], logits[1]) << "Auto at " << start << " ran another form than " << mla_path_name(chosen);
    EXPECT_TRUE(testing::relative_close(logits[2], logits[1], 1e-4)) << start;
  }
}

// With --bf16-terms 1 and no AMX the expanded prefill's attention runs on bf16
// panels (queries, keys, values and probabilities rounded to bf16; an f32 model, so nothing
// else is rounded): its logits stay within bf16 rounding of the absorbed form's fp32 attention
// over an f32 cache (1e-3 to 2e-3 here; a rope key or a value feature packed from the wrong
// slot exceeds 1e-2).
TEST(MlaPrefillPath, ExpandedOnBf16PanelsAgreesWithAbsorbed) {
  KernelConfig kernels = kernel_config();
  kernels.amx = false;
  kernels.bf16_activation_terms = 1;
  if (!prefill_attention_on_bf16_dot(kernels))
    GTEST_SKIP() << "the attention runs on bf16 panels only with AVX512_BF16";
  const ScopedKernelConfig use(kernels);
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::F32, 9);
  auto model = load_causal_lm(dir.path());
  const ModelConfig& config = model->config();
  std::vector<int32_t> tokens(77);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 13) % size_t(config.vocab_size));
  std::vector<std::vector<float>> logits;
  for (MlaPath path : {MlaPath::Expanded, MlaPath::Absorbed}) {
    SequenceCache cache(config, int64_t(tokens.size()), CacheDType::F32);
    logits.emplace_back(tokens.size() * size_t(config.vocab_size));
    model->forward(tokens, 0, cache.view(), true, logits.back().data(), path);
  }
  EXPECT_TRUE(testing::relative_close(logits[0], logits[1], 1e-2));
  EXPECT_FALSE(testing::relative_close(logits[0], logits[1], 1e-6)) << "the expanded form did not round to bf16";
}

}  // namespace
}  // namespace mlaserve
