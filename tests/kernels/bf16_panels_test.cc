// BF16 weights repacked at load into 16-row panels (linear_weight.h, bf16_panel_decode.h):
// every token count's path against the scalar reference, row ranges inside panels, odd
// columns, a token's bits alone and in a batch; and the aligned copies the panels live in.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "io/linear_weight.h"
#include "kernels/dispatch.h"
#include "kernels/dequantize.h"
#include "kernels/linear.h"
#include "linear_test_weights.h"
#include "test_util.h"

namespace mlaserve {
namespace {

using testing::make_weight, testing::reference, testing::TestWeight;

// A BF16 view repacked into 16-row panels: 1, 2 and 3 tokens (panels streamed 4, 2 or 1 at a
// time, the leftovers one at a time, with a column tail), more
// and many tokens (the packed GEMM on stored panels: partial last panel, pieces of 256
// columns, a second tile of tokens), all against the scalar reference over the view's slice.
TEST(LinearBf16Panels, RepackedViewsMatchScalarReference) {
  for (auto [rows, cols, tokens] :
       {std::tuple{1, 32, 1}, {37, 203, 1}, {83, 203, 1}, {37, 203, 2}, {70, 203, 3}, {40, 96, 13}, {61, 613, 203}}) {
    const TestWeight t = make_weight(WeightFormat::BF16, rows + 5, cols + 9, uint64_t(rows * 5 + cols));
    WeightCopies storage;
    const LinearWeight packed = repack_bf16_panels(t.weight.rows_view(3, 3 + rows).cols_view(4, 4 + cols), storage);
    ASSERT_EQ(packed.format, WeightFormat::Bf16Panels);
    EXPECT_EQ(packed.bytes(), size_t((rows + 15) / 16 * 16 * ((cols + 31) / 32 * 32) * 2));  // whole 16 x 32 tiles
    EXPECT_EQ(packed.stored_codes().begin, packed.data);
    EXPECT_EQ(packed.stored_codes().bytes, packed.bytes());
    TestWeight slice;
    slice.weight.rows = rows;
    slice.weight.cols = cols;
    for (int64_t r = 3; r < 3 + rows; ++r)
      for (int64_t c = 4; c < 4 + cols; ++c) slice.values.push_back(t.values[size_t(r * (cols + 9) + c)]);
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens + cols));
    std::vector<float> y(size_t(tokens * rows));
    linear(packed, x.data(), tokens, y.data());
    EXPECT_TRUE(testing::relative_close(y, reference(slice, x, tokens), 1e-5))
        << "rows=" << rows << " cols=" << cols << " tokens=" << tokens;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(packed, r, row.data());
      ASSERT_TRUE(std::equal(row.begin(), row.end(), slice.values.begin() + r * cols)) << "row " << r;
    }
  }
}

// Row ranges that start and end inside a panel write exactly their rows (7 panels: streamed in
// quads, pairs or singly for 1, 2, 3 tokens; for 9, in panel pairs and a last single panel
// with AVX-512, else GEMM blocks).
TEST(LinearBf16Panels, RowRangesInsidePanels) {
  const int64_t rows = 120, cols = 72, row_begin = 5, row_end = 109;
  const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, 41);
  WeightCopies storage;
  const LinearWeight packed = repack_bf16_panels(t.weight, storage);
  for (int64_t tokens : {1, 2, 3, 9}) {
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens));
    const std::vector<float> want = reference(t, x, tokens);
    const int64_t width = row_end - row_begin + 2;  // a guard column either side
    std::vector<float> y(size_t(tokens * width), -7.0f);
    linear_rows(packed, row_begin, row_end, x.data(), cols, tokens, y.data() + 1, width);
    for (int64_t n = 0; n < tokens; ++n) {
      EXPECT_EQ(y[size_t(n * width)], -7.0f);
      EXPECT_EQ(y[size_t(n * width + width - 1)], -7.0f);
      for (int64_t r = row_begin; r < row_end; ++r)
        EXPECT_NEAR(y[size_t(n * width + 1 + r - row_begin)], want[size_t(n * rows + r)], 1e-4)
            << "token " << n << " row " << r;
    }
  }
}

// Panels are read a column pair at a time: with an odd number of columns the last pair's
// second column is padding, and no path reads the activation after a row's last one (here a
// NaN, which times the padding's zero would poison the sum).
TEST(LinearBf16Panels, OddColumnsReadNoActivationPastTheRow) {
  const int64_t rows = 37, cols = 203, x_stride = cols + 1;
  const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, 43);
  WeightCopies storage;
  const LinearWeight packed = repack_bf16_panels(t.weight, storage);
  for (int64_t tokens : {1, 2, 3, 5, 9, 20, 70}) {
    const std::vector<float> x = testing::random_vector(size_t(tokens * cols), uint64_t(tokens + 5));
    std::vector<float> strided(size_t(tokens * x_stride), std::nanf(""));
    for (int64_t n = 0; n < tokens; ++n) std::copy_n(x.begin() + n * cols, cols, strided.begin() + n * x_stride);
    std::vector<float> y(size_t(tokens * rows));
    linear_rows(packed, 0, rows, strided.data(), x_stride, tokens, y.data(), rows);
    EXPECT_TRUE(testing::relative_close(y, reference(t, x, tokens), 1e-5)) << tokens << " tokens";
  }
}

// Every path over panels (4, 2 or 1 panels at a time for 1-3 tokens; panel pairs against token
// blocks of 4-8 for 4-15 tokens with AVX-512; GEMM blocks of 4-6 tokens, a second tile) sums a
// (row, token) in the same order: a token's outputs are the same
// bits alone and in any batch, as the engine's continuous batching relies on. On an AMX host
// batches of 16+ tokens run the AMX kernel, which sums in its own order: the same bits
// in any such batch (AmxGemm.AnyBatchGivesTheSameBits), within fp32 rounding of the rest.
TEST(LinearBf16Panels, AnyTokenCountGivesTheSingleTokenBits) {
  const int64_t rows = 83, cols = 613;  // 6 panels (a quad, a pair, leftovers); 3 column pieces
  const TestWeight t = make_weight(WeightFormat::BF16, rows, cols, 57);
  WeightCopies storage;
  const LinearWeight packed = repack_bf16_panels(t.weight, storage);
  const std::vector<float> x = testing::random_vector(size_t(200 * cols), 58);
  std::vector<float> alone(static_cast<size_t>(rows));
  for (int64_t tokens : {2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 15, 200}) {
    std::vector<float> y(size_t(tokens * rows));
    linear(packed, x.data(), tokens, y.data());
    for (int64_t n : {int64_t(0), tokens / 2, tokens - 1}) {
      linear(packed, x.data() + n * cols, 1, alone.data());
      const std::vector<float> in_batch(y.begin() + n * rows, y.begin() + (n + 1) * rows);
      if (choose_linear_kernel(packed, tokens, kernel_config()) == LinearKernel::AmxTiles) {
        EXPECT_TRUE(testing::relative_close(in_batch, alone, 1e-6)) << tokens << " tokens, token " << n;
      } else {
        EXPECT_EQ(in_batch, alone) << tokens << " tokens, token " << n;
      }
    }
  }
}

// Copies are 64-byte aligned, disjoint (each keeps its own bytes however the small ones are
// packed), those of 2 MB and more on 2 MB boundaries, and counted in bytes().
TEST(WeightCopies, AlignedDisjointAndCounted) {
  WeightCopies storage;
  const std::vector<size_t> sizes = {1, 100, 512 << 10, 3 << 20, 70, 31 << 20, 2 << 20, 1000};
  std::vector<std::pair<uint8_t*, size_t>> copies;
  size_t counted = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    uint8_t* copy = storage.allocate(sizes[i]);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(copy) % 64, 0u) << sizes[i];
    if (sizes[i] >= (2u << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(copy) % (2u << 20), 0u) << sizes[i];
    }
    std::memset(copy, int(i + 1), sizes[i]);
    copies.emplace_back(copy, sizes[i]);
    counted += (sizes[i] + 63) / 64 * 64;
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    const auto [copy, size] = copies[i];
    EXPECT_EQ(copy[0], uint8_t(i + 1)) << sizes[i];
    EXPECT_EQ(copy[size - 1], uint8_t(i + 1)) << sizes[i];
  }
  EXPECT_EQ(storage.bytes(), counted);
}

TEST(LinearBf16Panels, OnlyBf16IsRepackedAndPanelsHaveNoViews) {
  const TestWeight int4 = make_weight(WeightFormat::Int4Group, 16, 64, 3);
  WeightCopies storage;
  EXPECT_EQ(repack_bf16_panels(int4.weight, storage).format, WeightFormat::Int4Group);
  EXPECT_EQ(storage.bytes(), 0u);
  const TestWeight bf16 = make_weight(WeightFormat::BF16, 16, 64, 3);
  const LinearWeight packed = repack_bf16_panels(bf16.weight, storage);
  EXPECT_THROW(packed.rows_view(0, 8), Error);
  EXPECT_THROW(packed.cols_view(0, 32), Error);
}

}  // namespace
}  // namespace mlaserve
