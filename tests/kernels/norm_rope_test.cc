// RMSNorm (alone, split over the pool, and fused with the residual add) and the rotary
// embedding (one slice and every head of a token at once) against double-precision references.
#include <gtest/gtest.h>

#include <cmath>

#include "io/model_config.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

// Rows: more than the pool's per-task share, an odd count; dim odd (a vector tail).
constexpr int64_t kRows = 37, kDim = 77;

std::vector<float> reference_rms_norm(const std::vector<float>& x, const std::vector<float>& weight, double eps) {
  std::vector<float> out(x.size());
  for (int64_t row = 0; row < kRows; ++row) {
    double mean_square = 0.0;
    for (int64_t i = 0; i < kDim; ++i) mean_square += double(x[row * kDim + i]) * x[row * kDim + i];
    const double inverse_rms = 1.0 / std::sqrt(mean_square / kDim + eps);
    for (int64_t i = 0; i < kDim; ++i) out[row * kDim + i] = float(x[row * kDim + i] * inverse_rms * weight[i]);
  }
  return out;
}

TEST(RmsNorm, MatchesReferenceOverManyRows) {
  const auto x = testing::random_vector(kRows * kDim, 1, 3.0f);
  const auto weight = testing::random_vector(kDim, 2);
  std::vector<float> out(x.size());
  rms_norm(x.data(), kDim, weight.data(), kRows, kDim, 1e-6, out.data(), kDim);
  // fp32 sum of 77 squares and three products: a few ulps.
  EXPECT_TRUE(testing::relative_close(out, reference_rms_norm(x, weight, 1e-6), 1e-6));
}

TEST(RmsNorm, FusedResidualAddGivesTheSameBits) {
  auto residual = testing::random_vector(kRows * kDim, 3, 2.0f);
  const auto delta = testing::random_vector(kRows * kDim, 4, 0.5f);
  const auto weight = testing::random_vector(kDim, 5);
  std::vector<float> want_residual = residual, want(residual.size()), got(residual.size());
  for (size_t i = 0; i < want_residual.size(); ++i) want_residual[i] += delta[i];
  rms_norm(want_residual.data(), kDim, weight.data(), kRows, kDim, 1e-6, want.data(), kDim);
  add_rms_norm(residual.data(), delta.data(), weight.data(), kRows, kDim, 1e-6, got.data());
  EXPECT_EQ(residual, want_residual);
  EXPECT_EQ(got, want);
}

// HF apply_rotary_pos_emb on the interleaved checkpoint layout: permute to evens then odds,
// then out_i = y_i cos - y_{i+d/2} sin, out_{i+d/2} = y_{i+d/2} cos + y_i sin.
std::vector<float> reference_rope(const RotaryEmbedding& rope, const float* x, int64_t position) {
  const int64_t half = rope.dim() / 2;
  std::vector<float> out(size_t(rope.dim()));
  for (int64_t i = 0; i < half; ++i) {
    const double angle = double(position) * rope.inv_freq()[size_t(i)];
    const double c = std::cos(angle) * rope.attention_factor(), s = std::sin(angle) * rope.attention_factor();
    out[size_t(i)] = float(x[2 * i] * c - x[2 * i + 1] * s);
    out[size_t(i + half)] = float(x[2 * i + 1] * c + x[2 * i] * s);
  }
  return out;
}

TEST(Rope, EveryHeadOfATokenMatchesTheReference) {
  nlohmann::json json = model_preset("tiny");
  json["rope_scaling"] = {{"type", "yarn"},
                          {"factor", 8},
                          {"original_max_position_embeddings", 32},
                          {"mscale", 0.7},
                          {"mscale_all_dim", 1.0}};
  const ModelConfig config = parse_model_config(json);
  const RotaryEmbedding rope(config.qk_rope_head_dim, config.rope_theta, config.rope_scaling);
  const int64_t heads = 5, stride = rope.dim() + 3;  // slices apart, not adjacent
  for (const int64_t position : {0, 1, 37, 1000}) {
    const auto x = testing::random_vector(size_t(heads * stride), uint64_t(10 + position));
    std::vector<float> together = x, one_by_one = x;
    rope.apply(together.data(), position, heads, stride);
    for (int64_t h = 0; h < heads; ++h) rope.apply(one_by_one.data() + h * stride, position);
    EXPECT_EQ(together, one_by_one) << "position " << position;
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<float> got(together.begin() + h * stride, together.begin() + h * stride + rope.dim());
      // float products of float-rounded cos/sin against double ones: ~1e-7 relative.
      EXPECT_TRUE(testing::relative_close(got, reference_rope(rope, x.data() + h * stride, position), 1e-6))
          << "position " << position << " head " << h;
      EXPECT_EQ(together[size_t(h * stride + rope.dim())], x[size_t(h * stride + rope.dim())]) << "gap untouched";
    }
  }
}

// Llama / Qwen3 rotate_half on features as stored: x_i pairs with x_{i + d/2}.
TEST(Rope, HalvesPairingRotatesFeatureIWithFeatureIPlusHalf) {
  const RotaryEmbedding rope(64, 1e6, std::nullopt, RotaryPairing::Halves);
  const int64_t half = rope.dim() / 2;
  for (const int64_t position : {0, 5, 999}) {
    const auto x = testing::random_vector(size_t(rope.dim()), uint64_t(70 + position));
    std::vector<float> got = x, want(x.size());
    rope.apply(got.data(), position);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = double(position) * std::pow(1e6, -double(2 * i) / double(rope.dim()));
      want[size_t(i)] = float(x[size_t(i)] * std::cos(angle) - x[size_t(i + half)] * std::sin(angle));
      want[size_t(i + half)] = float(x[size_t(i + half)] * std::cos(angle) + x[size_t(i)] * std::sin(angle));
    }
    EXPECT_TRUE(testing::relative_close(got, want, 1e-6)) << "position " << position;
  }
}

}  // namespace
}  // namespace mlaserve
