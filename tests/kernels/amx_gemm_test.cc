// The AMX kernels (BF16 panels, row-major BF16, INT8 and FP8, the 4-bit integer GEMM) against
// float64 references and the AVX integer GEMM, where the host has AMX (skipped elsewhere: the
// kernels are compiled only with AMX and run only once Linux grants the tile state).
#include "kernels/amx_gemm.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>

#include "base/dtype.h"
#include "base/error.h"
#include "io/linear_weight.h"
#include "kernels/gemm_4bit.h"
#include "kernels/linear.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// A random BF16 matrix repacked into panels, with the values it holds and its row-major view.
struct PanelWeight {
  std::vector<uint16_t> bf16;
  std::vector<float> values;
  WeightCopies storage;
  LinearWeight row_major, packed;

  PanelWeight(int64_t rows, int64_t cols, uint64_t seed) : bf16(size_t(rows * cols)), values(bf16.size()) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (size_t i = 0; i < bf16.size(); ++i) {
      bf16[i] = f32_to_bf16(uniform(rng));
      values[i] = bf16_to_f32(bf16[i]);
    }
    row_major.format = WeightFormat::BF16;
    row_major.rows = rows;
    row_major.cols = row_major.stored_cols = cols;
    row_major.data = bf16.data();
    packed = repack_bf16_panels(row_major, storage);
  }
};

// y[t][r - row_begin] in float64 from the exact values of a row-major weight `cols` wide.
std::vector<float> reference(const std::vector<float>& values, int64_t cols, int64_t row_begin, int64_t row_end,
                             const std::vector<float>& x, int64_t tokens) {
  const int64_t width = row_end - row_begin;
  std::vector<float> y(size_t(tokens * width));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = row_begin; r < row_end; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += double(values[size_t(r * cols + c)]) * x[size_t(t * cols + c)];
      y[size_t(t * width + r - row_begin)] = float(sum);
    }
  return y;
}

std::vector<float> reference(const PanelWeight& w, int64_t row_begin, int64_t row_end, const std::vector<float>& x,
                             int64_t tokens) {
  return reference(w.values, w.packed.cols, row_begin, row_end, x, tokens);
}

// A random 4-bit weight: INT4 (groups of `group`) or MXFP4, codes and scales owned here.
struct FourBitWeight {
  std::vector<uint8_t> codes, e8m0;
  std::vector<uint16_t> scales;
  LinearWeight weight;

  FourBitWeight(WeightFormat format, int64_t rows, int64_t cols, int64_t group, uint64_t seed)
      : codes(size_t(rows * cols / 2)) {
    std::mt19937_64 rng(seed);
    for (auto& byte : codes) byte = uint8_t(rng());
    weight.format = format;
    weight.rows = rows;
    weight.cols = weight.stored_cols = cols;
    weight.data = codes.data();
    if (format == WeightFormat::Mxfp4) {
      e8m0.resize(size_t(rows * cols / 32));
      for (auto& scale : e8m0) scale = uint8_t(120 + rng() % 12);
      weight.e8m0_scale = e8m0.data();
      weight.group_size = 32;
    } else {
      scales.resize(size_t(rows * cols / group));
      for (auto& scale : scales) scale = f32_to_bf16(0.001f + 0.01f * float(rng() % 256));
      weight.group_scale = scales.data();
      weight.group_size = group;
    }
  }
};

// A random FP8 E4M3 weight with 128 x 128 block scales (every code but NaN), codes and scales
// owned here, with the values it holds (row-major).
struct Fp8Weight {
  std::vector<uint8_t> codes;
  std::vector<float> block_scales, values;
  LinearWeight weight;

  Fp8Weight(int64_t rows, int64_t cols, uint64_t seed) : codes(size_t(rows * cols)), values(codes.size()) {
    const int64_t blocks = (cols + 127) / 128;
    std::mt19937_64 rng(seed);
    block_scales.resize(size_t((rows + 127) / 128 * blocks));
    for (auto& scale : block_scales) scale = 0.001f + 0.0001f * float(rng() % 256);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t code = uint8_t(rng());
        if ((code & 0x7f) == 0x7f) code ^= 1;  // no NaN codes
        codes[size_t(r * cols + c)] = code;
        values[size_t(r * cols + c)] = fp8_e4m3_to_f32(code) * block_scales[size_t(r / 128 * blocks + c / 128)];
      }
    weight.format = WeightFormat::Fp8Block;
    weight.rows = rows;
    weight.cols = weight.stored_cols = cols;
    weight.data = codes.data();
    weight.block_scale = block_scales.data();
  }
};

// linear_rows_amx over rows [r0, r1) x columns [c0, c1) of a weight against the float64 sums
// of the values they hold (values: the whole weight's, row-major), bound 1e-6.
::testing::AssertionResult view_matches_reference(const LinearWeight& weight, const std::vector<float>& values,
                                                  int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t tokens) {
  const LinearWeight view = weight.rows_view(r0, r1).cols_view(c0, c1);
  if (!amx_supports(view)) return ::testing::AssertionFailure() << "the AMX kernel does not take the view";
  const int64_t width = c1 - c0, cols = weight.cols;
  const std::vector<float> x = testing::random_vector(size_t(tokens * width), uint64_t(tokens + r0));
  std::vector<float> y(size_t(tokens * (r1 - r0))), want(y.size());
  linear_rows_amx(view, 0, r1 - r0, x.data(), width, tokens, y.data(), r1 - r0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = r0; r < r1; ++r) {
      double sum = 0;
      for (int64_t c = c0; c < c1; ++c) sum += double(values[size_t(r * cols + c)]) * x[size_t(t * width + c - c0)];
      want[size_t(t * (r1 - r0) + r - r0)] = float(sum);
    }
  return testing::relative_close(y, want, 1e-6);
}

class AmxGemm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!amx_available()) GTEST_SKIP() << "no AMX-BF16 on this host or build";
  }
};

// Sizes past every edge: fewer columns than one 32-column step, a column tail (odd, and even
// inside a step), one and an odd number of panels, a partial last panel, row ranges starting
// and ending inside panels, token blocks of 16 with a partial last one, a single block, and
// two groups of 128 tokens. Splitting x into three bf16 terms represents it exactly, so the
// sums are fp32 ones in another order (0.9e-7 to 4.5e-7 here): a bound of 1e-6, which a
// two-term split (16 bits of x) fails at 2.1e-6 to 3.1e-6.
TEST_F(AmxGemm, MatchesFloat64Reference) {
  for (auto [rows, cols, row_begin, row_end, tokens] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{16, 31, 0, 16, 16},
        {37, 203, 0, 37, 17},
        {83, 613, 5, 79, 40},
        {48, 96, 17, 31, 129},
        {130, 2080, 0, 130, 300},
        {64, 64, 16, 64, 33}}) {
    const PanelWeight w(rows, cols, uint64_t(rows * 7 + cols));
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens + cols));
    const int64_t width = row_end - row_begin + 2;  // a guard column either side
    std::vector<float> y(size_t(tokens * width), -7.0f);
    linear_rows_amx(w.packed, row_begin, row_end, x.data(), cols, tokens, y.data() + 1, width);
    std::vector<float> got;
    for (int64_t t = 0; t < tokens; ++t) {
      EXPECT_EQ(y[size_t(t * width)], -7.0f);
      EXPECT_EQ(y[size_t(t * width + width - 1)], -7.0f);
      got.insert(got.end(), y.begin() + t * width + 1, y.begin() + (t + 1) * width - 1);
    }
    EXPECT_TRUE(testing::relative_close(got, reference(w, row_begin, row_end, x, tokens), 1e-6))
        << "rows " << rows << " cols " << cols << " range " << row_begin << ".." << row_end << " tokens " << tokens;
  }
}

// Activations a bf16 split must survive: 1e30 and 1e-30 beside ordinary values (each term
// a normal bf16), and an infinity, which reaches the outputs as it would in fp32.
TEST_F(AmxGemm, ExtremeActivations) {
  const int64_t rows = 32, cols = 96, tokens = 16;
  const PanelWeight w(rows, cols, 5);
  std::vector<float> x = testing::random_vector(size_t(tokens * cols), 6);
  for (int64_t c = 0; c < 32; ++c) x[size_t(c)] *= 1e30f;
  for (int64_t c = 0; c < cols; ++c) x[size_t(cols + c)] *= 1e-30f;
  std::vector<float> y(size_t(tokens * rows));
  linear_rows_amx(w.packed, 0, rows, x.data(), cols, tokens, y.data(), rows);
  EXPECT_TRUE(testing::relative_close(y, reference(w, 0, rows, x, tokens), 1e-6));
  x[size_t(2 * cols + 5)] = INFINITY;
  linear_rows_amx(w.packed, 0, rows, x.data(), cols, tokens, y.data(), rows);
  for (int64_t r = 0; r < rows; ++r) {
    const float weight = w.values[size_t(r * cols + 5)];
    ASSERT_NE(weight, 0.0f);
    EXPECT_EQ(y[size_t(2 * rows + r)], std::copysign(INFINITY, weight)) << "row " << r;
  }
  EXPECT_TRUE(std::isfinite(y[size_t(3 * rows)]));
}

// Past a group's last column its activation tiles hold zeros whatever an earlier call left
// there: an infinity in a step's last columns, times the zero weights past the next call's
// columns, would make its sums NaN.
TEST_F(AmxGemm, NoActivationsPastTheLastColumn) {
  const int64_t rows = 32, tokens = 16;
  const PanelWeight wide(rows, 320, 25), narrow(rows, 300, 26);
  std::vector<float> x_wide = testing::random_vector(size_t(tokens * 320), 27);
  x_wide[size_t(5 * 320 + 310)] = INFINITY;
  std::vector<float> y(size_t(tokens * rows));
  linear_rows_amx(wide.packed, 0, rows, x_wide.data(), 320, tokens, y.data(), rows);
  const std::vector<float> x = testing::random_vector(size_t(tokens * 300), 28);
  linear_rows_amx(narrow.packed, 0, rows, x.data(), 300, tokens, y.data(), rows);
  EXPECT_TRUE(testing::relative_close(y, reference(narrow, 0, rows, x, tokens), 1e-6));
}

// Row-major BF16, channel-scaled INT8 and INT8 with a scale per 64 columns (B tiles built
// from the rows): views starting at odd rows and columns (a group's first column for groups),
// column counts ending inside a 32-column step (BF16: NaN in the stored columns after it), and a
// last partial 16-row panel; scales applied to each scale block's sums. Group views starting
// inside a group are not taken.
TEST_F(AmxGemm, RowMajorBf16AndInt8Views) {
  for (int64_t group : {int64_t(0), int64_t(64)})
    for (WeightFormat format : {WeightFormat::BF16, WeightFormat::Int8Block})
      for (auto [rows, cols, r0, r1, c0, c1, tokens] :
           {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{40, 101, 0, 40, 0, 101, 64},
            {70, 300, 3, 61, 5, 298, 80},
            {70, 300, 3, 61, 64, 298, 80},
            {33, 67, 1, 33, 2, 65, 129}}) {
        if (group > 0 && (format == WeightFormat::BF16 || c0 % group != 0)) continue;
        const int64_t block_cols = group > 0 ? group : cols, blocks = (cols + block_cols - 1) / block_cols;
        std::mt19937_64 rng(uint64_t(rows + cols));
        std::vector<uint8_t> data(size_t(rows * cols * (format == WeightFormat::BF16 ? 2 : 1)));
        std::vector<float> values(size_t(rows * cols)), block_scales(size_t(rows * blocks));
        for (auto& scale : block_scales) scale = 0.001f + 0.0001f * float(rng() % 256);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r * cols + c);
            if (format == WeightFormat::BF16) {
              // NaN past the view: a column read beyond it would turn its zero activations' sums NaN.
              const uint16_t bits = c >= c1 ? uint16_t(0x7fc0) : f32_to_bf16(float(int(rng() % 2001) - 1000) / 997.0f);
              std::memcpy(&data[2 * i], &bits, 2);
              values[i] = bf16_to_f32(bits);
            } else {
              data[i] = uint8_t(rng());
              values[i] = float(int8_t(data[i])) * block_scales[size_t(r * blocks + c / block_cols)];
            }
          }
        }
        LinearWeight weight;
        weight.format = format;
        weight.rows = rows;
        weight.cols = weight.stored_cols = cols;
        weight.data = data.data();
        weight.block_scale = block_scales.data();
        weight.block_rows = 1;
        weight.block_cols = block_cols;
        EXPECT_TRUE(view_matches_reference(weight, values, r0, r1, c0, c1, tokens))
            << weight_format_name(format) << " group " << group << " rows " << r0 << ".." << r1 << " cols " << c0
            << ".." << c1;
      }
  LinearWeight grouped;
  grouped.format = WeightFormat::Int8Block;
  grouped.rows = 4;
  grouped.cols = grouped.stored_cols = 128;
  grouped.block_rows = 1;
  grouped.block_cols = 64;
  EXPECT_TRUE(amx_supports(grouped.cols_view(64, 128)));
  EXPECT_FALSE(amx_supports(grouped.cols_view(32, 128)));
}

// FP8 E4M3 with 128 x 128 block scales: every code (subnormals included: they reach the tile
// unit as normal bf16 of value / 2^8), row views whose 16-row panels straddle scale blocks, a
// column view starting on a block boundary, column counts ending inside a block and inside a
// 32-column step; views starting inside a block are not taken.
TEST_F(AmxGemm, Fp8BlockScales) {
  const Fp8Weight w(300, 600, 17);
  for (auto [r0, r1, c0, c1, tokens] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{0, 300, 0, 600, 16},
                                        {9, 277, 128, 517, 40},
                                        {120, 140, 256, 600, 129}}) {
    EXPECT_TRUE(view_matches_reference(w.weight, w.values, r0, r1, c0, c1, tokens))
        << "rows " << r0 << ".." << r1 << " cols " << c0 << ".." << c1;
  }
  EXPECT_FALSE(amx_supports(w.weight.cols_view(64, 600)));
}

// Rows longer than one chunk of columns (DeepSeek-V3's 7168-wide hidden state is 3.5 chunks
// with three terms): 4500 columns in three chunks, which for FP8 hold whole 128-column scale
// blocks (48 steps, not 47), against float64 for stored panels, row-major BF16 and FP8, in two
// groups of tokens; the last 16 tokens alone get the bits they get in the batch (chunks do not
// depend on the token count).
TEST_F(AmxGemm, LongRowsInColumnChunks) {
  const int64_t rows = 40, cols = 4500, tokens = 130, r0 = 3, r1 = 37;
  const PanelWeight bf16(rows, cols, 31);
  const Fp8Weight fp8(rows, cols, 32);
  const std::tuple<const LinearWeight*, const std::vector<float>*> weights[] = {
      {&bf16.packed, &bf16.values}, {&bf16.row_major, &bf16.values}, {&fp8.weight, &fp8.values}};
  const std::vector<float> x = testing::random_vector(size_t(tokens * cols), 33);
  for (auto [weight, values] : weights) {
    const std::string format = weight_format_name(weight->format);
    std::vector<float> all(size_t(tokens * (r1 - r0))), last(size_t(16 * (r1 - r0)));
    linear_rows_amx(*weight, r0, r1, x.data(), cols, tokens, all.data(), r1 - r0);
    EXPECT_TRUE(testing::relative_close(all, reference(*values, cols, r0, r1, x, tokens), 1e-6)) << format;
    linear_rows_amx(*weight, r0, r1, x.data() + (tokens - 16) * cols, cols, 16, last.data(), r1 - r0);
    EXPECT_TRUE(std::equal(last.begin(), last.end(), all.end() - std::ptrdiff_t(last.size()))) << format;
  }
}

// A token's outputs depend on its own activations only: the same bits in a batch of 16, of
// 129 (another position in its block and group) and of 300.
TEST_F(AmxGemm, AnyBatchGivesTheSameBits) {
  const int64_t rows = 40, cols = 300;
  const PanelWeight w(rows, cols, 9);
  const std::vector<float> x = testing::random_vector(size_t(300 * cols), 10);
  std::vector<float> all(size_t(300 * rows));
  linear_rows_amx(w.packed, 0, rows, x.data(), cols, 300, all.data(), rows);
  for (int64_t first : {0, 113, 284}) {
    const int64_t tokens = first == 113 ? 129 : 16;
    std::vector<float> part(size_t(tokens * rows));
    linear_rows_amx(w.packed, 0, rows, x.data() + first * cols, cols, tokens, part.data(), rows);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + first * rows)) << "from token " << first;
  }
}

// Activations that are bf16 values (the latents of a bf16 cache) need only the first term: a
// group of them runs one tile product a step, each row within the float64 bound, and its
// tokens get the bits they get in a group where one token needs all three (the other terms add
// zeros). A row-major and a panel weight; a group of 128 tokens (the last the odd one) and a
// partial second group.
TEST_F(AmxGemm, Bf16ActivationsNeedOneTerm) {
  const int64_t rows = 48, cols = 200, tokens = 131, odd = 127;
  const PanelWeight w(rows, cols, 21);
  std::vector<float> x = testing::random_vector(size_t(tokens * cols), 22);
  for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));
  const std::vector<float> want = reference(w, 0, rows, x, tokens);
  const LinearWeight* weights[] = {&w.packed, &w.row_major};
  for (int64_t odd_column : {3, 197}) {  // split 16 columns at a time, and in the scalar tail
    std::vector<float> mixed = x;
    mixed[size_t(odd * cols + odd_column)] = 0.1f;  // no bf16 value
    const std::vector<float> want_mixed = reference(w, 0, rows, mixed, tokens);
    for (const LinearWeight* weight : weights) {
      std::vector<float> exact(size_t(tokens * rows)), beside(exact.size());
      linear_rows_amx(*weight, 0, rows, x.data(), cols, tokens, exact.data(), rows);
      linear_rows_amx(*weight, 0, rows, mixed.data(), cols, tokens, beside.data(), rows);
      const std::string label = fmt::format("{}, odd column {}", weight_format_name(weight->format), odd_column);
      EXPECT_TRUE(testing::relative_close(exact, want, 1e-6)) << label;
      EXPECT_TRUE(testing::relative_close(beside, want_mixed, 1e-6)) << label << ": the odd token needs three terms";
      EXPECT_TRUE(std::equal(exact.begin(), exact.begin() + odd * rows, beside.begin()))
          << label << ": the group's other tokens beside one needing three terms";
      EXPECT_NE(std::vector<float>(exact.begin() + odd * rows, exact.begin() + (odd + 1) * rows),
                std::vector<float>(beside.begin() + odd * rows, beside.begin() + (odd + 1) * rows));
    }
  }
}

// x with only its first `terms` bf16 terms (each the nearest bf16 to what the ones before it
// left), split here by the scalar rounding, not the kernel's vector conversion.
std::vector<float> first_terms(std::vector<float> x, int terms) {
  for (float& v : x) {
    float kept = 0, rest = v;
    for (int term = 0; term < terms; ++term) {
      const float part = bf16_to_f32(f32_to_bf16(rest));
      kept += part;
      rest -= part;
    }
    v = kept;
  }
  return x;
}

// --bf16-terms 3, 2 and 1: the outputs are the fp32 sums of the activations' first terms (bound
// 1e-6 against float64), for stored panels and row-major weights, in a group of 128 tokens and
// a partial second one. Each setting runs a whole number of 32-column steps first, then 300
// columns, whose last step's 20 columns past the end must be zero again, not the first run's.
TEST_F(AmxGemm, FewerTermsSumTheActivationsFirstTerms) {
  const int64_t rows = 40;
  for (int terms : {3, 2, 1})
    for (auto [cols, tokens] : {std::pair<int64_t, int64_t>{320, 160}, {300, 150}}) {
      const PanelWeight w(rows, cols, uint64_t(23 + cols));
      const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(24 + cols));
      const std::vector<float> want = reference(w, 0, rows, first_terms(x, terms), tokens);
      const LinearWeight* weights[] = {&w.packed, &w.row_major};
      for (const LinearWeight* weight : weights) {
        std::vector<float> y(size_t(tokens * rows));
        linear_rows_amx(*weight, 0, rows, x.data(), cols, tokens, y.data(), rows, terms);
        EXPECT_TRUE(testing::relative_close(y, want, 1e-6))
            << terms << " terms, " << weight_format_name(weight->format) << ", " << cols << " columns";
      }
    }
}

// The 4-bit GEMM on AMX-INT8 against the AVX integer GEMM, which forms the same exact integer
// block sums and scales them in another order (bound 1e-6): INT4 groups of 32 and 64, MXFP4, an
// unpaired last block (odd block count), a partial last row panel inside a row range, a partial
// last token block and two groups of 128 tokens; each token the same bits in a smaller batch.
TEST_F(AmxGemm, FourBitMatchesTheIntegerGemm) {
  for (auto [format, group, rows, cols, row_begin, row_end, tokens] :
       {std::tuple<WeightFormat, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>{WeightFormat::Int4Group, 32, 40,
                                                                                       96, 0, 40, 16},
        {WeightFormat::Int4Group, 64, 37, 640, 3, 30, 129},
        {WeightFormat::Mxfp4, 32, 48, 2080, 0, 48, 300},
        {WeightFormat::Mxfp4, 32, 19, 160, 2, 19, 17}}) {
    const FourBitWeight w(format, rows, cols, group, uint64_t(rows + cols));
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens));
    Q8Buffer q8;
    q8.quantize(x.data(), cols, tokens, cols);
    const int64_t width = row_end - row_begin;
    std::vector<float> got(size_t(tokens * width)), want(got.size());
    gemm_4bit_q8_rows_amx(w.weight, row_begin, row_end, q8, tokens, got.data(), width);
    gemm_4bit_q8_rows(w.weight, row_begin, row_end, q8, tokens, want.data(), width);
    EXPECT_TRUE(testing::relative_close(got, want, 1e-6))
        << weight_format_name(format) << " group " << group << " cols " << cols << " tokens " << tokens;
    const int64_t last = tokens - 16;
    Q8Buffer tail;
    tail.quantize(x.data() + last * cols, cols, 16, cols);
    std::vector<float> alone(size_t(16 * width));
    gemm_4bit_q8_rows_amx(w.weight, row_begin, row_end, tail, 16, alone.data(), width);
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + last * width)) << "tokens " << tokens;
  }
}

}  // namespace
}  // namespace mlaserve
