// INT4 and MXFP4 weights repacked into 16-row panels (repack_4bit_panels) against the float64
// reference of the int8-rounded activations, and against the integer GEMM on the row-major
// weight, whose steps and order the panel kernel keeps: the same bits for every token count.
#include "kernels/four_bit_panels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "base/dtype.h"
#include "base/error.h"
#include "io/linear_weight.h"
#include "kernels/gemm_4bit.h"
#include "kernels/dequantize.h"
#include "kernels/linear.h"
#include "linear_test_weights.h"
#include "test_util.h"

namespace mlaserve {
namespace {

using testing::kernel_input, testing::make_weight, testing::reference, testing::TestWeight;

constexpr std::pair<WeightFormat, int64_t> kFormats[] = {
    {WeightFormat::Int4Group, 32}, {WeightFormat::Int4Group, 160}, {WeightFormat::Mxfp4, 32}};

std::string name_of(WeightFormat format, int64_t group) {
  return std::string(weight_format_name(format)) + " group " + std::to_string(group);
}

// Rows 16p + i of the panels hold the stored words and scales of row 16p + i; rows past the
// weight's are zero; every row dequantizes to the values the format defines.
TEST(FourBitPanels, RepackKeepsEveryRowsCodesAndScales) {
  const int64_t rows = 37, cols = 320;
  for (const auto& [format, group] : kFormats) {
    const TestWeight t = make_weight(format, rows, cols, uint64_t(group + 3), group);
    WeightCopies copies;
    const LinearWeight panels = repack_4bit_panels(t.weight, copies);
    ASSERT_TRUE(is_4bit_panels(panels.format)) << name_of(format, group);
    const int64_t padded = 48, scale_bytes = format == WeightFormat::Mxfp4 ? 1 : 2;
    EXPECT_EQ(panels.bytes(), size_t(padded * cols / 2 + padded * (cols / group) * scale_bytes));
    EXPECT_EQ(panels.stored_codes().begin, panels.data);  // the codes, the scales after them
    EXPECT_EQ(panels.stored_codes().bytes, size_t(padded * cols / 2));
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(panels, r, row.data());
      EXPECT_EQ(row, std::vector<float>(t.values.begin() + r * cols, t.values.begin() + (r + 1) * cols))
          << name_of(format, group) << " row " << r;
    }
    const auto* words = static_cast<const uint32_t*>(panels.data);
    for (int64_t j = 0; j < cols / 8; ++j)
      for (int64_t i = rows - 32; i < 16; ++i) EXPECT_EQ(words[(2 * cols / 8 + j) * 16 + i], 0u);
    EXPECT_THROW(panels.rows_view(0, 16), Error);
  }
}

// Views (a tensor-parallel shard's rows and columns) repack their own part; a group that is
// no whole number of 32-column blocks stays row-major.
TEST(FourBitPanels, RepacksViewsAndLeavesOtherGroupsAlone) {
  const TestWeight t = make_weight(WeightFormat::Int4Group, 40, 256, 5, 64);
  WeightCopies copies;
  const LinearWeight view = t.weight.rows_view(8, 40).cols_view(64, 192);
  const LinearWeight panels = repack_4bit_panels(view, copies);
  std::vector<float> row(128), want(128);
  for (int64_t r = 0; r < 32; ++r) {
    dequantize_row(panels, r, row.data());
    dequantize_row(view, r, want.data());
    EXPECT_EQ(row, want) << "row " << r;
  }
  const TestWeight odd_group = make_weight(WeightFormat::Int4Group, 16, 48, 7, 48);
  EXPECT_EQ(repack_4bit_panels(odd_group.weight, copies).format, WeightFormat::Int4Group);
}

// 37 rows (two panels and 5 of a third), 2080 columns (65 blocks: chunks of 32, 32 and 1, the
// last block unpaired in Q8Buffer's order): every token count from 1 to 150 gives each token
// the bits the integer GEMM gives it on the row-major weight, and a row range starting and
// ending inside panels gives those rows' bits (on AVX2 it starts at a panel's second half, so
// the kernels' pairs of halves straddle panels).
TEST(FourBitPanels, EveryTokenCountGivesTheIntegerGemmsBits) {
  if (!four_bit_panels_built()) GTEST_SKIP() << "4-bit panels need AVX2 or AVX-512 VNNI";
  const int64_t rows = 37, cols = 2080, most = 150, range_begin = 13, range_end = 35,
                range_rows = range_end - range_begin;
  for (const auto& [format, group] : kFormats) {
    const std::string name = name_of(format, group);
    const TestWeight t = make_weight(format, rows, cols, uint64_t(group + 1), group);
    WeightCopies copies;
    const LinearWeight panels = repack_4bit_panels(t.weight, copies);
    const std::vector<float> x = testing::random_vector(size_t(most * cols), 17);
    Q8Buffer q8;
    q8.quantize(x.data(), cols, most, cols);
    std::vector<float> gemm(size_t(most * rows));
    gemm_4bit_q8_rows(t.weight, 0, rows, q8, most, gemm.data(), rows);
    EXPECT_TRUE(testing::relative_close(gemm, reference(t, kernel_input(t.weight, x, cols), most), 1e-5)) << name;
    for (int64_t tokens : std::array<int64_t, 10>{1, 2, 3, 5, 8, 9, 15, 16, 17, most}) {
      std::vector<float> y(size_t(tokens * rows)), range(size_t(tokens * range_rows));
      linear(panels, x.data(), tokens, y.data());
      EXPECT_EQ(y, std::vector<float>(gemm.begin(), gemm.begin() + tokens * rows)) << name << " tokens " << tokens;
      linear_rows(panels, range_begin, range_end, x.data(), cols, tokens, range.data(), range_rows);
      for (int64_t n = 0; n < tokens; ++n)
        EXPECT_EQ(std::vector<float>(range.begin() + n * range_rows, range.begin() + (n + 1) * range_rows),
                  std::vector<float>(y.begin() + n * rows + range_begin, y.begin() + n * rows + range_end))
            << name << " tokens " << tokens << " token " << n;
    }
  }
}

// MXFP4 block exponents at both ends of E8M0 (the panel kernel builds 2^(e - 128) from the
// byte: e = 0 and 1 subnormal, 255 the largest) and the largest codes against the largest
// int8 values: a row per exponent, codes +6 (INT4: +7; +0.5 with the high exponents, where
// 0.5 * 2^128 is the largest finite weight) everywhere, x all equal (q = 127), sized so the
// sums stay finite; against the float64 reference.
TEST(FourBitPanels, ExtremeScalesAndLargestCodes) {
  if (!four_bit_panels_built()) GTEST_SKIP() << "4-bit panels need AVX2 or AVX-512 VNNI";
  const int64_t rows = 16, cols = 320, tokens = 3;
  for (const auto& [format, group] : kFormats) {
    for (const auto& [first_exponent, x_size] : {std::pair{0, 1.0f}, {240, std::ldexp(1.0f, -40)}}) {
      const bool mxfp4 = format == WeightFormat::Mxfp4;
      if (!mxfp4 && first_exponent > 0) continue;  // INT4's bf16 scales: one case
      TestWeight t = make_weight(format, rows, cols, 61, group);
      const float code_value = mxfp4 ? (first_exponent > 0 ? 0.5f : 6.0f) : 7.0f;
      std::fill(t.bytes.begin(), t.bytes.end(),
                mxfp4 ? (first_exponent > 0 ? uint8_t(0x11) : uint8_t(0x77)) : uint8_t(0xff));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t b = 0; b < cols / group; ++b) {
          if (mxfp4) t.scales_u8[size_t(r * (cols / 32) + b)] = uint8_t(first_exponent + r);
          for (int64_t c = b * group; c < (b + 1) * group; ++c)
            t.values[size_t(r * cols + c)] =
                mxfp4 ? std::ldexp(code_value, first_exponent + int(r) - 127)
                      : code_value * bf16_to_f32(t.group_scale[size_t(r * (cols / group) + b)]);
        }
      WeightCopies copies;
      const LinearWeight panels = repack_4bit_panels(t.weight, copies);
      const std::vector<float> x(size_t(tokens * cols), mxfp4 ? x_size : 0.5f);
      std::vector<float> y(size_t(tokens * rows));
      linear(panels, x.data(), tokens, y.data());
      EXPECT_TRUE(testing::relative_close(y, reference(t, x, tokens), 1e-6))
          << name_of(format, group) << " e " << first_exponent;
    }
  }
}

}  // namespace
}  // namespace mlaserve
