// BF16 panels on vdpbf16ps with activations rounded to bf16 (bf16_dot_gemm.h, --bf16-terms 1
// without AMX): against a float64 reference of the rounded activations, row ranges inside
// panels, odd columns, two token tiles, fewer tokens than a tile (the streamed path), a token's
// bits in any batch, and which kernels linear_rows picks for each --bf16-terms.
#include "kernels/bf16_dot_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>

#include "base/dtype.h"
#include "io/linear_weight.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "linear_test_weights.h"
#include "test_util.h"

namespace mlaserve {
namespace {

using testing::make_weight, testing::reference, testing::TestWeight;

class Bf16DotGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!bf16_dot_gemm_built()) GTEST_SKIP() << "built without AVX512_BF16";
  }
};

// x with each value rounded to bf16 (round to nearest even), from dtype.h's definition.
std::vector<float> rounded_to_bf16(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return out;
}

// Rows [row_begin, row_end) of `rows` x `cols` random BF16 panels against `tokens` tokens whose
// rows lie cols + 1 apart with a NaN after each (read, it would poison the sums), written
// between guard columns; fp32 sums of the rounded products, so within 1e-5 of float64 (cols
// <= 613 products of ~1 each; without the rounding the error is ~2^-9). Columns 613 end in an
// odd piece (256 + 256 + 101), 203 tokens take two tiles (192 + 11), 16-25 tokens three to
// five blocks; rows run in groups of up to four panels: (5, 109) of 120 starts inside the first
// group and ends with three panels, the last partial, (17, 120) with four, (0, 61) one group,
// (0, 32) two panels and (3, 14) one, partial at both ends. Under 16 tokens each panel streams
// over the whole depth, four or two at a time (one from each equal part of the range) and the
// rest one by one: 1, 3 and 6 tokens in one block of four panels, 7 and 12 in one of two, 13
// and 15 in two; (5, 109): 7 panels, one group of four (or three of two) and the rest alone.
TEST_F(Bf16DotGemm, MatchesFloat64ReferenceOfRoundedActivations) {
  for (auto [rows, cols, tokens, row_begin, row_end] : {std::tuple{120, 96, 16, 5, 109},
                                                        {120, 613, 17, 17, 120},
                                                        {61, 203, 203, 0, 61},
                                                        {32, 512, 25, 0, 32},
                                                        {20, 130, 16, 3, 14},
                                                        {120, 613, 1, 5, 109},
                                                        {120, 96, 3, 17, 120},
                                                        {61, 203, 6, 0, 61},
                                                        {120, 613, 7, 5, 109},
                                                        {61, 130, 12, 3, 58},
                                                        {120, 203, 13, 5, 109},
                                                        {32, 512, 15, 0, 32},
                                                        {20, 130, 1, 3, 14}}) {
    const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, uint64_t(rows + cols));
    WeightCopies storage;
    const LinearWeight packed = repack_bf16_panels(t.weight, storage);
    const int64_t x_stride = cols + 1;
    std::vector<float> x = testing::random_vector(size_t(tokens * x_stride), uint64_t(tokens + cols), 2.0f);
    std::vector<float> dense(size_t(tokens * cols));
    for (int64_t n = 0; n < tokens; ++n) {
      x[size_t(n * x_stride + cols)] = NAN;
      std::memcpy(&dense[size_t(n * cols)], &x[size_t(n * x_stride)], size_t(cols) * 4);
    }
    const std::vector<float> full = reference(t, rounded_to_bf16(dense), tokens);
    const int64_t width = row_end - row_begin + 2;
    std::vector<float> y(size_t(tokens * width), -7.0f), got, want;
    bf16_dot_panel_rows(packed, row_begin, row_end, x.data(), x_stride, tokens, y.data() + 1, width);
    for (int64_t n = 0; n < tokens; ++n) {
      EXPECT_EQ(y[size_t(n * width)], -7.0f) << "token " << n;
      EXPECT_EQ(y[size_t(n * width + width - 1)], -7.0f) << "token " << n;
      for (int64_t r = row_begin; r < row_end; ++r) {
        got.push_back(y[size_t(n * width + 1 + r - row_begin)]);
        want.push_back(full[size_t(n * rows + r)]);
      }
    }
    EXPECT_TRUE(testing::relative_close(got, want, 1e-5)) << rows << " x " << cols << ", " << tokens << " tokens";
  }
}

// A token's outputs do not depend on its batch: 16 tokens alone (blocks of 5, 5 and 6), 1, 5,
// 8 and 13 (streamed) and the same tokens at 150 on of 200 (blocks of 6 in the first tile) give
// the same bits; 80 rows are five panels, so the streamed ones take a group and a lone panel.
TEST_F(Bf16DotGemm, AnyBatchGivesTheSameBits) {
  const int64_t rows = 80, cols = 300;
  const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, 61);
  WeightCopies storage;
  const LinearWeight packed = repack_bf16_panels(t.weight, storage);
  const std::vector<float> x = testing::random_vector(size_t(200 * cols), 62);
  std::vector<float> batch(size_t(200 * rows));
  bf16_dot_panel_rows(packed, 0, rows, x.data(), cols, 200, batch.data(), rows);
  for (int64_t tokens : {16, 1, 5, 8, 13}) {
    std::vector<float> alone(size_t(tokens * rows));
    bf16_dot_panel_rows(packed, 0, rows, x.data() + 150 * cols, cols, tokens, alone.data(), rows);
    EXPECT_EQ(std::memcmp(alone.data(), batch.data() + 150 * rows, alone.size() * 4), 0) << tokens << " tokens";
  }
}

// Without AMX, linear_rows sends BF16 panels of 2+ tokens here for --bf16-terms 1 only: 2 and 3
// keep the exact fp32 kernels (the bits of the default), few tokens and many; one token keeps
// them at every term count.
TEST_F(Bf16DotGemm, LinearRowsTakesItForOneTermOnly) {
  const int64_t rows = 40, cols = 160;
  const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, 71);
  WeightCopies storage;
  const LinearWeight packed = repack_bf16_panels(t.weight, storage);
  for (int64_t tokens : {1, 8, 15, 16, 40}) {
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(72 + tokens));
    auto run = [&](int terms) {
      std::vector<float> y(size_t(tokens * rows));
      KernelConfig config = kernel_config();
      config.amx = false;
      config.bf16_activation_terms = terms;
      const ScopedKernelConfig use(config);
      linear(packed, x.data(), tokens, y.data());
      return y;
    };
    std::vector<float> dot(size_t(tokens * rows));
    bf16_dot_panel_rows(packed, 0, rows, x.data(), cols, tokens, dot.data(), rows);
    const std::vector<float> exact = run(3), one = run(1), two = run(2);
    EXPECT_EQ(two, exact) << tokens << " tokens";
    EXPECT_EQ(one == dot, tokens > 1) << tokens << " tokens";
    EXPECT_EQ(one == exact, tokens == 1) << tokens << " tokens";
  }
}

}  // namespace
}  // namespace mlaserve
