// linear() for every weight format against a scalar reference that dequantises from the
// format definitions directly (not through the kernel's dequantize_row).
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "io/linear_weight.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/dequantize.h"
#include "linear_test_weights.h"
#include "test_util.h"

namespace mlaserve {
namespace {

using testing::kernel_input, testing::make_weight, testing::reference, testing::TestWeight;

class LinearTest : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(LinearTest, MatchesScalarReference) {
  // Odd sizes: partial FP8 blocks, SIMD tails, an unpaired last 32-column block, one row, one token.
  for (auto [rows, cols, tokens] : {std::tuple{1, 32, 1}, {37, 96, 1}, {130, 288, 3}, {9, 1056, 5}}) {
    const TestWeight t = make_weight(GetParam(), rows, cols, uint64_t(rows * 31 + cols));
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(cols));
    std::vector<float> y(size_t(tokens * rows));
    linear(t.weight, x.data(), tokens, y.data());
    EXPECT_TRUE(testing::relative_close(y, reference(t, kernel_input(t.weight, x, cols), tokens), 1e-5))
        << weight_format_name(GetParam()) << " rows=" << rows << " cols=" << cols;
  }
}

// Many tokens run as a packed GEMM (panels of 16 rows, pieces of 256 columns, tiles of 192
// tokens in blocks of 6) from 64 tokens for F32/BF16/F16; the 4-bit formats from 16 tokens run
// the integer GEMM (panels of 8 rows, chunks of 1024 columns, tiles of 128 tokens, on the
// int8-rounded activations); INT8 and FP8 take the packed GEMM like the float formats (panels
// dequantised on packing; on AMX hosts FP8 from 16 tokens and INT8 from 64 run the tile kernel,
// and unit.linear_without_amx runs these tests again without it). Sizes past every one of
// those, with partial panels, pieces, tiles and blocks (and, for the float formats, a column
// count that is no multiple of 8); 13 tokens take the 4 x 3 dot blocks, the FP8 / INT8 fused
// dots (AVX-512) or the int8 dots; 40 the 4 x 3 blocks (float formats), the tiles or the packed
// GEMM (FP8, INT8) or the integer GEMM. 100 rows give each thread whole pairs of panels (AVX-512 runs
// decoded panels two at a time) and a lone one.
TEST_P(LinearTest, ManyTokensMatchScalarReference) {
  const bool four_bit = GetParam() == WeightFormat::Int4Group || GetParam() == WeightFormat::Mxfp4;
  for (auto [rows, cols, tokens] : {std::tuple{61, four_bit ? 608 : 613, 203},
                                    {7, 96, 70},
                                    {30, 544, 13},
                                    {23, 288, 40},
                                    {100, four_bit ? 288 : 300, 70}}) {
    const TestWeight t = make_weight(GetParam(), rows, cols, uint64_t(rows * 7 + cols));
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens));
    std::vector<float> y(size_t(tokens * rows));
    linear(t.weight, x.data(), tokens, y.data());
    EXPECT_TRUE(testing::relative_close(y, reference(t, kernel_input(t.weight, x, cols), tokens), 1e-5))
        << weight_format_name(GetParam()) << " rows=" << rows << " cols=" << cols << " tokens=" << tokens;
  }
}

// The int8 activations of the 4-bit formats cost accuracy against exact fp32 activations:
// rounding x to 8 bits per block of 32 moves the outputs by about 0.5% of the largest (0.71%
// INT4, 0.56% MXFP4 here; docs/kernels.md). A bound 3x that catches a wrong scale or block.
TEST_P(LinearTest, QuantizedActivationsStayCloseToExact) {
  const int64_t rows = 64, cols = 2048;
  const TestWeight t = make_weight(GetParam(), rows, cols, 41);
  const std::vector<float> x = testing::random_vector(size_t(cols), 43);
  std::vector<float> y(static_cast<size_t>(rows));
  linear(t.weight, x.data(), 1, y.data());
  EXPECT_TRUE(testing::relative_close(y, reference(t, x, 1), 2e-2)) << weight_format_name(GetParam());
}

// --act-quant off: 4-bit weights meet the activations unrounded, for every token count (the
// single-token dots, the 4 x 3 blocks, the packed GEMM from 64 tokens), so their products are
// the dequantized weight's exactly; and such a weight is not repacked into int8-only panels.
TEST(LinearFourBit, ActivationQuantOffIsExact) {
  for (WeightFormat format : {WeightFormat::Int4Group, WeightFormat::Mxfp4}) {
    for (auto [rows, cols, tokens] : {std::tuple{37, 96, 1}, {30, 544, 13}, {23, 288, 40}, {61, 608, 203}}) {
      TestWeight t = make_weight(format, rows, cols, uint64_t(rows + cols));
      t.weight.activation_quant = ActivationQuant::Off;
      const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens));
      std::vector<float> y(size_t(tokens * rows));
      linear(t.weight, x.data(), tokens, y.data());
      EXPECT_TRUE(testing::relative_close(y, reference(t, x, tokens), 1e-5))
          << weight_format_name(format) << " rows=" << rows << " tokens=" << tokens;
    }
    TestWeight t = make_weight(format, 32, 64, 5);
    t.weight.activation_quant = ActivationQuant::Off;
    WeightCopies copies;
    EXPECT_EQ(repack_4bit_panels(t.weight, copies).format, format);
  }
}

// Activation blocks the int8 rounding must survive, in separate 32-column blocks: all zeros
// (scale 0) beside ordinary values; only tiny (1e-30) values; huge (1e30) beside ordinary.
TEST_P(LinearTest, ExtremeActivationBlocks) {
  const int64_t rows = 9, cols = 160;
  const TestWeight t = make_weight(GetParam(), rows, cols, 51);
  const std::vector<float> base = testing::random_vector(size_t(cols), 53);
  for (const auto& [zero_end, scale] : {std::pair{64, 1.0f}, {160, 1e-30f}, {64, 1e30f}}) {
    std::vector<float> x = base;
    for (int64_t c = 32; c < zero_end; ++c) x[size_t(c)] = 0.0f;
    if (scale != 1.0f)
      for (int64_t c = scale < 1.0f ? 0 : 96; c < (scale < 1.0f ? 32 : 128); ++c) x[size_t(c)] *= scale;
    std::vector<float> y(static_cast<size_t>(rows));
    linear(t.weight, x.data(), 1, y.data());
    EXPECT_TRUE(testing::relative_close(y, reference(t, kernel_input(t.weight, x, cols), 1), 1e-5))
        << weight_format_name(GetParam()) << " scale " << scale;
  }
}

// INT4 groups: 64, 96 and 128 columns (several Q8 blocks a scale: a shift, a division), and 16
// (not whole blocks: the kernel dequantizes rows and keeps x exact). From 16 tokens whole-block
// groups run as the integer GEMM on the same int8 activations, summed in another order.
TEST(LinearInt4, GroupSizes) {
  for (auto [group, tokens] : {std::pair<int64_t, int64_t>{16, 3}, {16, 67}, {64, 3}, {64, 20}, {96, 3}, {128, 3}}) {
    const int64_t rows = 19, cols = 384;
    const TestWeight t = make_weight(WeightFormat::Int4Group, rows, cols, uint64_t(group), group);
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), 5);
    std::vector<float> y(size_t(tokens * rows)), single(static_cast<size_t>(rows));
    linear(t.weight, x.data(), tokens, y.data());
    linear(t.weight, x.data(), 1, single.data());
    const std::vector<float> want = reference(t, kernel_input(t.weight, x, cols), tokens);
    EXPECT_TRUE(testing::relative_close(y, want, 1e-5)) << "group " << group << " tokens " << tokens;
    const std::vector<float> first_token(y.begin(), y.begin() + rows);
    if (group % 32 == 0 && tokens < 16) {
      EXPECT_EQ(single, first_token) << "group " << group;  // the same int8 dot, batch or not
    } else {
      EXPECT_TRUE(testing::relative_close(single, first_token, 1e-5)) << "group " << group;
    }
  }
}

// The 4-bit formats from 16 tokens run the integer GEMM (gemm_4bit.h): columns over two chunks
// of 1024 and an unpaired last block (65 blocks), INT4 groups of one block and of 5, MXFP4
// (with AVX2 its 16-bit sums widened every 4 steps), 37 rows in panels of 16 (VNNI) or 8 with
// a tail, 17 tokens in blocks of 8, 8 and 1 (VNNI), 6, 6 and 5 (AVX2 INT4) or 4 x 4 and 1
// (AVX2 MXFP4), and 150 over two tiles of 128. Its integer sums are exact and each (row,
// token) takes the same float steps in any block of tokens or rows, so the first 16 tokens
// keep their bits in larger batches and a row range (5-29: a panel's tail, then panels
// starting mid-weight) gives the whole's rows.
TEST(LinearFourBit, IntegerGemmAcrossChunksTilesAndTokenBlocks) {
  const int64_t rows = 37, cols = 2080, range_begin = 5, range_end = 29, range_rows = range_end - range_begin;
  for (const auto& [format, group] :
       {std::pair{WeightFormat::Int4Group, 32}, {WeightFormat::Int4Group, 160}, {WeightFormat::Mxfp4, 32}}) {
    const std::string name = std::string(weight_format_name(format)) + " group " + std::to_string(group);
    const TestWeight t = make_weight(format, rows, cols, uint64_t(group + 1), group);
    const std::vector<float> x = testing::random_vector(size_t(150 * cols), 17);
    std::vector<float> first16(size_t(16 * rows));
    linear(t.weight, x.data(), 16, first16.data());
    for (int64_t tokens : {17, 150}) {
      const std::vector<float> x_used(x.begin(), x.begin() + tokens * cols);
      std::vector<float> y(size_t(tokens * rows)), range(size_t(tokens * range_rows));
      linear(t.weight, x.data(), tokens, y.data());
      EXPECT_TRUE(testing::relative_close(y, reference(t, kernel_input(t.weight, x_used, cols), tokens), 1e-5))
          << name << " tokens " << tokens;
      EXPECT_EQ(first16, std::vector<float>(y.begin(), y.begin() + 16 * rows)) << name;
      linear_rows(t.weight, range_begin, range_end, x.data(), cols, tokens, range.data(), range_rows);
      for (int64_t n = 0; n < tokens; ++n)
        EXPECT_EQ(std::vector<float>(range.begin() + n * range_rows, range.begin() + (n + 1) * range_rows),
                  std::vector<float>(y.begin() + n * rows + range_begin, y.begin() + n * rows + range_end))
            << name << " token " << n;
    }
  }
}

// The largest codes against the largest int8 activations (every x equal: q = 127): an INT4
// block's 16-bit sums reach 30480 (codes 15), MXFP4's would reach 48768 (codes of +6, 24 as
// unsigned) if they were not widened every 4 steps.
TEST(LinearFourBit, LargestCodesAndActivationsDoNotOverflow) {
  const int64_t rows = 8, cols = 64, tokens = 16;
  for (WeightFormat format : {WeightFormat::Int4Group, WeightFormat::Mxfp4}) {
    TestWeight t = make_weight(format, rows, cols, 61);
    const bool mxfp4 = format == WeightFormat::Mxfp4;
    std::fill(t.bytes.begin(), t.bytes.end(), mxfp4 ? uint8_t(0x77) : uint8_t(0xff));  // +6.0 / +7
    for (int64_t i = 0; i < rows * cols; ++i)
      t.values[size_t(i)] = mxfp4 ? 6.0f * std::ldexp(1.0f, int(t.scales_u8[size_t(i / 32)]) - 127)
                                  : 7.0f * bf16_to_f32(t.group_scale[size_t(i / 32)]);
    const std::vector<float> x(size_t(tokens * cols), 0.5f);
    std::vector<float> y(size_t(tokens * rows));
    linear(t.weight, x.data(), tokens, y.data());
    EXPECT_TRUE(testing::relative_close(y, reference(t, x, tokens), 1e-6)) << weight_format_name(format);
  }
}

// MXFP4 block exponents at both ends of E8M0: the VNNI step builds 2^(e - 127) from the
// exponent byte (e = 0 and 1 give subnormal floats, 255 the largest). A row per exponent, every
// block of it; codes +0.5 or 0 (0.5 * 2^128 is the largest finite weight) and x positive, so no
// sum cancels, x near 1 for the low exponents and near 2^-40 for the high (the sums stay finite);
// 160 columns: a step of 4 blocks and a last block alone. Each row against the float64
// reference of the int8-rounded x on its own scale.
TEST(LinearMxfp4, BlockExponentsAtTheEndsOfTheirRange) {
  const int64_t rows = 8, cols = 160;
  std::mt19937 rng(9);
  for (const auto& [exponents, x_size] :
       {std::pair{std::array{0, 1, 2, 3, 0, 1, 2, 3}, 1.0f},
        {std::array{126, 127, 253, 254, 255, 253, 254, 255}, std::ldexp(1.0f, -40)}}) {
    TestWeight t = make_weight(WeightFormat::Mxfp4, rows, cols, 71);
    std::fill(t.bytes.begin(), t.bytes.end(), uint8_t(0));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        t.scales_u8[size_t((r * cols + c) / 32)] = uint8_t(exponents[size_t(r)]);
        const bool half = rng() % 4 != 0;  // code 1: +0.5
        t.bytes[size_t((r * cols + c) / 2)] |= uint8_t(half ? 1 << (4 * (c % 2)) : 0);
        t.values[size_t(r * cols + c)] = half ? std::ldexp(0.5f, exponents[size_t(r)] - 127) : 0.0f;
      }
    for (int64_t tokens : {1, 3}) {
      std::vector<float> x(size_t(tokens * cols));
      for (auto& v : x) v = x_size * (0.25f + float(rng() % 1000) / 1000.0f);
      std::vector<float> y(size_t(tokens * rows));
      linear(t.weight, x.data(), tokens, y.data());
      const std::vector<float> want = reference(t, kernel_input(t.weight, x, cols), tokens);
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_TRUE(want[i] > 0.0f && std::isfinite(want[i]));
        EXPECT_NEAR(y[i], want[i], 1e-6 * want[i]) << "exponent " << exponents[i % rows] << ", " << tokens << " tokens";
      }
    }
  }
}

// BF16, F32 and the 4-bit formats give a token the same bits alone as in a batch below the
// packed GEMM's threshold (64 tokens; 16 for 4-bit): one token and several run the same
// per-(row, token) accumulation. So do FP8 and INT8 up to 15 tokens where the fused dots take
// several tokens at once (AVX-512: groups of up to 4, 7 tokens as 3 + 4, 15 as 3 + 4 + 4 + 4);
// also through a view whose columns start and end inside 16-column chunks (37 and 269 of
// 288: each token's scalar edges). F16 dequantizes rows for batches and differs by ~1e-7.
TEST(LinearBatch, FewTokensGiveTheSingleTokenBits) {
  std::vector<WeightFormat> formats = {WeightFormat::F32, WeightFormat::BF16, WeightFormat::Int4Group,
                                       WeightFormat::Mxfp4};
  if (block_scaled_max_tokens() > 1) formats.insert(formats.end(), {WeightFormat::Fp8Block, WeightFormat::Int8Block});
  for (WeightFormat format : formats) {
    const bool four_bit = format == WeightFormat::Int4Group || format == WeightFormat::Mxfp4;
    const bool byte_codes = is_block_scaled(format);
    const int64_t rows = 23, stored_cols = 288;  // quads and leftover rows on each thread
    const TestWeight t = make_weight(format, rows, stored_cols, 31);
    for (const auto& [c0, c1] : {std::pair<int64_t, int64_t>{0, stored_cols}, {37, 269}}) {
      if (c0 > 0 && !byte_codes) continue;
      const LinearWeight weight = c0 > 0 ? t.weight.cols_view(c0, c1) : t.weight;
      const int64_t cols = c1 - c0;
      for (int64_t tokens : {2, 3, 4, 7, 15, 40, 63}) {
        if ((four_bit || byte_codes) && tokens >= 16) continue;
        const std::vector<float> x = testing::random_vector(size_t(tokens * cols), 9);
        std::vector<float> batch(size_t(tokens * rows)), single(static_cast<size_t>(rows));
        linear(weight, x.data(), tokens, batch.data());
        for (int64_t token : {int64_t(0), tokens / 2, tokens - 1}) {
          linear(weight, x.data() + token * cols, 1, single.data());
          EXPECT_EQ(single, std::vector<float>(batch.begin() + token * rows, batch.begin() + (token + 1) * rows))
              << weight_format_name(format) << " columns " << c0 << ".." << c1 << " token " << token << " of "
              << tokens;
        }
      }
    }
  }
}

// Rows 5..29: 6 spread quads of BF16 rows and one leftover; for the float formats also a
// column count with a tail after the 8-wide vectors. Three tokens at once (coefficient and
// output strides wider than a row) against the reference, and each with the bits it gets alone.
TEST_P(LinearTest, TransposedRowsMatchReference) {
  const bool any_cols = GetParam() == WeightFormat::BF16 || GetParam() == WeightFormat::F32;
  for (const int64_t cols : any_cols ? std::vector<int64_t>{64, 67} : std::vector<int64_t>{64}) {
    const int64_t rows = 40, tokens = 3, coef_stride = rows + 3, y_stride = cols + 5;
    const TestWeight t = make_weight(GetParam(), rows, cols, 7);
    const std::vector<float> coef = testing::random_vector(size_t(tokens * coef_stride), 3);
    const std::vector<float> start = testing::random_vector(size_t(tokens * y_stride), 4);
    std::vector<float> y = start, want = start;
    linear_transposed_rows(t.weight, 5, 30, coef.data() + 5, coef_stride, tokens, y.data(), y_stride);
    for (int64_t token = 0; token < tokens; ++token) {
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 5; r < 30; ++r)
          want[size_t(token * y_stride + c)] += coef[size_t(token * coef_stride + r)] * t.values[r * cols + c];
      std::vector<float> alone(start.begin() + token * y_stride, start.begin() + token * y_stride + cols);
      linear_transposed_rows(t.weight, 5, 30, coef.data() + token * coef_stride + 5, 0, 1, alone.data(), 0);
      EXPECT_EQ(alone, std::vector<float>(y.begin() + token * y_stride, y.begin() + token * y_stride + cols))
          << weight_format_name(GetParam()) << " token " << token;
    }
    EXPECT_TRUE(testing::relative_close(y, want, 1e-5)) << weight_format_name(GetParam()) << " cols " << cols;
  }
}

// A shard view (rows [r0, r1), columns [c0, c1)) computes the same as the slice of the whole.
void views_compute_the_slice(WeightFormat format, int64_t tokens) {
  const int64_t rows = 150, cols = 640;
  const TestWeight t = make_weight(format, rows, cols, 21);
  const int64_t r0 = 17, r1 = 141, c0 = 96, c1 = 608;  // FP8 view crosses 128-column blocks
  const LinearWeight view = t.weight.rows_view(r0, r1).cols_view(c0, c1);
  const std::vector<float> x = testing::random_vector(size_t(tokens * (c1 - c0)), 5);
  const std::vector<float> seen = kernel_input(view, x, c1 - c0);
  std::vector<float> y(size_t(tokens * (r1 - r0))), want(y.size());
  linear(view, x.data(), tokens, y.data());
  for (int64_t n = 0; n < tokens; ++n)
    for (int64_t r = r0; r < r1; ++r) {
      double sum = 0;
      for (int64_t c = c0; c < c1; ++c) sum += double(t.values[r * cols + c]) * seen[n * (c1 - c0) + (c - c0)];
      want[n * (r1 - r0) + (r - r0)] = float(sum);
    }
  EXPECT_TRUE(testing::relative_close(y, want, 1e-5)) << weight_format_name(format) << " tokens " << tokens;
  std::vector<float> single(size_t(r1 - r0));
  linear(view, x.data(), 1, single.data());
  EXPECT_TRUE(testing::relative_close(single, std::vector<float>(want.begin(), want.begin() + (r1 - r0)), 1e-5));
}

// With 3 tokens (4 x 3 dot blocks) and 67 (the packed GEMM's 256-column pieces for the float
// formats, here starting 96 columns into the stored rows).
TEST_P(LinearTest, ViewsComputeTheSlice) {
  for (int64_t tokens : {3, 67}) views_compute_the_slice(GetParam(), tokens);
}

// FP8 rows for 1-15 tokens read aligned 16-column chunks with vector code and the rest (a
// view's edges, scale-block boundaries that fall inside a chunk) one column at a time: views
// starting 37 columns in (every block boundary misaligned) and 16 in (aligned), ending
// mid-chunk; 1 token, 3 (one group of the fused dots), 7 (two) and 15, against float64.
TEST(LinearFp8, FewTokenViewsAtAnyColumn) {
  const int64_t rows = 150, cols = 640;
  const TestWeight t = make_weight(WeightFormat::Fp8Block, rows, cols, 29);
  for (int64_t tokens : {1, 3, 7, 15})
    for (const auto& [c0, c1] : {std::pair<int64_t, int64_t>{37, 611}, {16, 627}, {0, 640}}) {
      const int64_t r0 = 9, r1 = 140, width = c1 - c0;
      const LinearWeight view = t.weight.rows_view(r0, r1).cols_view(c0, c1);
      const std::vector<float> x = testing::random_vector(size_t(tokens * width), uint64_t(c0 + 3 + tokens));
      std::vector<float> y(size_t(tokens * (r1 - r0))), want(y.size());
      linear(view, x.data(), tokens, y.data());
      for (int64_t n = 0; n < tokens; ++n)
        for (int64_t r = r0; r < r1; ++r) {
          double sum = 0;
          for (int64_t c = c0; c < c1; ++c) sum += double(t.values[r * cols + c]) * x[size_t(n * width + c - c0)];
          want[size_t(n * (r1 - r0) + r - r0)] = float(sum);
        }
      EXPECT_TRUE(testing::relative_close(y, want, 1e-5)) << tokens << " tokens, columns " << c0 << ".." << c1;
    }
}

// INT8 with one scale per row (strategy channel): views starting at any column keep reading
// the row's scale (a view is never copied: its columns start inside the one scale block), for
// one token (dequantised rows), a few (dot blocks) and many (the packed GEMM).
TEST(LinearInt8, ChannelScaledViewsAtAnyColumn) {
  const int64_t rows = 70, cols = 301;
  const TestWeight t = make_weight(WeightFormat::Int8Block, rows, cols, 31, cols);
  ASSERT_EQ(t.weight.block_cols, cols);
  for (int64_t tokens : {1, 5, 66})
    for (const auto& [c0, c1] : {std::pair<int64_t, int64_t>{37, 290}, {0, 301}}) {
      const int64_t r0 = 3, r1 = 61;
      const LinearWeight view = t.weight.rows_view(r0, r1).cols_view(c0, c1);
      WeightCopies storage;
      EXPECT_EQ(compact_columns(view, storage).col_offset, view.col_offset);
      const std::vector<float> x = testing::random_vector(size_t(tokens * (c1 - c0)), uint64_t(c0 + tokens));
      std::vector<float> y(size_t(tokens * (r1 - r0))), want(y.size());
      linear(view, x.data(), tokens, y.data());
      for (int64_t n = 0; n < tokens; ++n)
        for (int64_t r = r0; r < r1; ++r) {
          double sum = 0;
          for (int64_t c = c0; c < c1; ++c) sum += double(t.values[r * cols + c]) * x[size_t(n * (c1 - c0) + c - c0)];
          want[size_t(n * (r1 - r0) + r - r0)] = float(sum);
        }
      EXPECT_TRUE(testing::relative_close(y, want, 1e-5)) << "tokens " << tokens << " columns " << c0 << ".." << c1;
    }
}

// A compacted copy of a column view computes the same numbers from its own bytes, for views
// aligned to FP8 scale blocks (copied) and not (kept as views).
TEST_P(LinearTest, CompactedColumnViewsMatchTheView) {
  const int64_t rows = 300, cols = 512, tokens = 2;
  const TestWeight t = make_weight(GetParam(), rows, cols, 23);
  for (const auto& [r0, r1, c0, c1] : {std::array<int64_t, 4>{128, 256, 128, 384}, {17, 141, 96, 224}}) {
    const LinearWeight view = t.weight.rows_view(r0, r1).cols_view(c0, c1);
    WeightCopies storage;
    const LinearWeight packed = compact_columns(view, storage);
    const bool copied = storage.bytes() > 0;
    EXPECT_EQ(copied, GetParam() != WeightFormat::Fp8Block || r0 % 128 == 0) << weight_format_name(GetParam());
    if (copied) {
      EXPECT_EQ(packed.stored_cols, c1 - c0);
    }
    const std::vector<float> x = testing::random_vector(size_t(tokens * (c1 - c0)), 9);
    std::vector<float> want(size_t(tokens * (r1 - r0))), got(want.size());
    linear(view, x.data(), tokens, want.data());
    linear(packed, x.data(), tokens, got.data());
    EXPECT_EQ(got, want) << weight_format_name(GetParam()) << " rows " << r0 << " cols " << c0;
  }
}

// A copied weight (what a rank does with non-BF16 weights at load) computes the same numbers
// from its own bytes: the whole weight and a row view, each copied into storage.
TEST_P(LinearTest, CopiedWeightsMatchTheWeight) {
  const int64_t rows = 300, cols = 512, tokens = 3;
  const TestWeight t = make_weight(GetParam(), rows, cols, 29);
  for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {128, 256}}) {
    const LinearWeight view = t.weight.rows_view(r0, r1);
    WeightCopies storage;
    const LinearWeight copy = copy_weight(view, storage);
    EXPECT_GE(storage.bytes(), view.bytes()) << weight_format_name(GetParam());
    EXPECT_NE(copy.data, view.data);
    EXPECT_EQ(copy.row_offset, 0);
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), 11);
    std::vector<float> want(size_t(tokens * (r1 - r0))), got(want.size());
    linear(view, x.data(), tokens, want.data());
    linear(copy, x.data(), tokens, got.data());
    EXPECT_EQ(got, want) << weight_format_name(GetParam()) << " rows " << r0;
  }
}

// What --mlock locks: a weight's stored rows of data and scales. The whole weight spans its
// buffers; a view [r0, r1) x [c0, c1) spans whole stored rows r0..r1 (FP8: the scale-block rows
// they fall in).
TEST_P(LinearTest, StoredRangesAreTheViewsRows) {
  const int64_t rows = 300, cols = 256, r0 = 130, r1 = 200;
  const TestWeight t = make_weight(GetParam(), rows, cols, 13);
  const auto* data = static_cast<const uint8_t*>(t.weight.data);
  const size_t row_bytes = t.bytes.size() / size_t(rows);
  const std::vector<ByteRange> whole = t.weight.stored_ranges();
  const std::vector<ByteRange> view = t.weight.rows_view(r0, r1).cols_view(64, 192).stored_ranges();
  ASSERT_EQ(whole.size(), view.size());
  EXPECT_EQ(whole[0].begin, data);
  EXPECT_EQ(whole[0].bytes, t.bytes.size());
  EXPECT_EQ(view[0].begin, data + size_t(r0) * row_bytes);
  EXPECT_EQ(view[0].bytes, size_t(r1 - r0) * row_bytes);
  const LinearWeight view_weight = t.weight.rows_view(r0, r1).cols_view(64, 192);
  EXPECT_EQ(t.weight.stored_codes().begin, whole[0].begin);  // the codes alone: the first range
  EXPECT_EQ(t.weight.stored_codes().bytes, whole[0].bytes);
  EXPECT_EQ(view_weight.stored_codes().begin, view[0].begin);
  EXPECT_EQ(view_weight.stored_codes().bytes, view[0].bytes);
  size_t total = 0;
  for (const ByteRange& range : whole) total += range.bytes;
  EXPECT_EQ(total, t.weight.bytes()) << weight_format_name(GetParam());
  if (whole.size() == 1) return;
  const auto* scales = static_cast<const uint8_t*>(whole[1].begin);
  const size_t scale_row = whole[1].bytes / size_t(GetParam() == WeightFormat::Fp8Block ? 3 : rows);
  const int64_t first_scale_row = GetParam() == WeightFormat::Fp8Block ? 1 : r0;  // rows 130..199: block 1
  const int64_t scale_rows = GetParam() == WeightFormat::Fp8Block ? 1 : r1 - r0;
  EXPECT_EQ(view[1].begin, scales + size_t(first_scale_row) * scale_row) << weight_format_name(GetParam());
  EXPECT_EQ(view[1].bytes, size_t(scale_rows) * scale_row) << weight_format_name(GetParam());
}

TEST(LinearView, Int4ColumnsSplitOnlyAtGroupBoundaries) {
  LinearWeight weight;
  weight.format = WeightFormat::Int4Group;
  weight.rows = 4;
  weight.cols = weight.stored_cols = 128;
  weight.group_size = 32;
  EXPECT_NO_THROW(weight.cols_view(64, 128));
  EXPECT_THROW(weight.cols_view(40, 128), Error);
  EXPECT_THROW(weight.rows_view(2, 9), Error);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, LinearTest,
                         ::testing::Values(WeightFormat::F32, WeightFormat::BF16, WeightFormat::F16,
                                           WeightFormat::Fp8Block, WeightFormat::Int8Block, WeightFormat::Int4Group,
                                           WeightFormat::Mxfp4),
                         [](const auto& param_info) { return std::string(weight_format_name(param_info.param)); });

}  // namespace
}  // namespace mlaserve
