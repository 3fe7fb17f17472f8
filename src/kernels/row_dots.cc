#include "kernels/row_dots.h"

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/dequantize.h"
#include "kernels/linear.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

// A per-thread row buffer for formats that are dequantized before the dot product.
float* row_scratch(int64_t cols) {
  thread_local std::vector<float> scratch;
  if (int64_t(scratch.size()) < cols) scratch.resize(size_t(cols));
  return scratch.data();
}

}  // namespace

namespace {

// out[k * n_tokens + t] = sum_c W[rows[k], c] * x_t[c] for n_rows FP8 or INT8 rows (1, or 4 read
// together) and n_tokens tokens (up to block_scaled_max_tokens()).
void dot_block_scaled_weight_rows(const LinearWeight& weight, const int64_t* rows, int n_rows,
                                  const BlockScaledActivations* const tokens[], int n_tokens, float* out) {
  const int64_t stored_blocks = (weight.stored_cols + weight.block_cols - 1) / weight.block_cols;
  const uint8_t* codes[4];
  const float* scales[4];
  for (int k = 0; k < n_rows; ++k) {
    codes[k] = static_cast<const uint8_t*>(weight.data) + weight.element_offset(rows[k]);
    scales[k] = weight.block_scale + ((weight.row_offset + rows[k]) / weight.block_rows) * stored_blocks +
                weight.col_offset / weight.block_cols;
  }
  dot_block_scaled_rows(codes, scales, n_rows, weight.col_offset % weight.block_cols, weight.block_cols, tokens,
                        n_tokens, weight.cols, out);
}

// Rows in quads a quarter of the range apart: quad i of [begin, end) is rows begin + i,
// begin + q + i, begin + 2q + i and begin + 3q + i (q = (end - begin) / 4); rows from
// begin + 4q on are left over. A memory-bound dot over 4 distant rows at once keeps 4
// independent streams of loads in flight where 4 neighbouring rows are one.
struct SpreadQuads {
  int64_t begin, quarter;
  SpreadQuads(int64_t row_begin, int64_t row_end) : begin(row_begin), quarter((row_end - row_begin) / 4) {}
  int64_t row(int64_t quad, int k) const { return begin + k * quarter + quad; }
  void rows(int64_t quad, int64_t out[4]) const {
    for (int k = 0; k < 4; ++k) out[k] = row(quad, k);
  }
  int64_t leftover_begin() const { return begin + 4 * quarter; }
};

template <class Element>
const Element* row_data(const LinearWeight& weight, int64_t row) {
  return static_cast<const Element*>(weight.data) + weight.element_offset(row);
}

// One token's dot products with the 4 rows of a quad (BF16 or F32).
void quad_single_token(const LinearWeight& weight, const int64_t rows[4], const float* x, float out[4]) {
  if (weight.format == WeightFormat::BF16) {
    const uint16_t* w[4];
    for (int k = 0; k < 4; ++k) w[k] = row_data<uint16_t>(weight, rows[k]);
    return simd::dot_4xn<1>(w, &x, weight.cols, out);
  }
  const float* w[4];
  for (int k = 0; k < 4; ++k) w[k] = row_data<float>(weight, rows[k]);
  simd::dot_4xn<1>(w, &x, weight.cols, out);
}

}  // namespace

// BF16 and F32 rows go in spread quads, others one at a time.
void one_token_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, float* y) {
  const int64_t cols = weight.cols;
  const SpreadQuads quads(row_begin, row_end);
  int64_t r = row_begin;
  if (weight.format == WeightFormat::BF16 || weight.format == WeightFormat::F32) {
    for (int64_t quad = 0; quad < quads.quarter; ++quad) {
      int64_t rows[4];
      quads.rows(quad, rows);
      float out[4];
      quad_single_token(weight, rows, x, out);
      for (int k = 0; k < 4; ++k) y[rows[k] - row_begin] = out[k];
    }
    r = quads.leftover_begin();
  }
  for (; r < row_end; ++r) {
    float& out = y[r - row_begin];
    if (weight.format == WeightFormat::F32) {
      out = simd::dot_f32(row_data<float>(weight, r), x, cols);
    } else if (weight.format == WeightFormat::BF16) {
      out = simd::dot_bf16_f32(row_data<uint16_t>(weight, r), x, cols);
    } else {
      float* w = row_scratch(cols);
      dequantize_row(weight, r, w);
      out = simd::dot_f32(w, x, cols);
    }
  }
}

// Each token's activations are prepared alone (scaled by their own power of two); rows in spread
// quads, leftover rows one at a time.
void block_scaled_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                           int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr int kMostTokens = 16;
  thread_local std::array<BlockScaledActivations, kMostTokens> prepared;
  MLA_CHECK(n_tokens <= std::min(kMostTokens, block_scaled_max_tokens()), "FP8/INT8 fused dots: {} tokens", n_tokens);
  const ByteCode code = weight.format == WeightFormat::Fp8Block ? ByteCode::Fp8E4M3 : ByteCode::Int8;
  const BlockScaledActivations* tokens[kMostTokens];
  for (int64_t t = 0; t < n_tokens; ++t) {
    prepared[size_t(t)].prepare(x + t * x_stride, weight.cols, code);
    tokens[t] = &prepared[size_t(t)];
  }
  const auto run = [&](const int64_t* rows, int n_rows) {
    float out[4 * kMostTokens];
    dot_block_scaled_weight_rows(weight, rows, n_rows, tokens, int(n_tokens), out);
    for (int k = 0; k < n_rows; ++k)
      for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + rows[k] - row_begin] = out[k * n_tokens + t];
  };
  const SpreadQuads quads(row_begin, row_end);
  for (int64_t quad = 0; quad < quads.quarter; ++quad) {
    int64_t rows[4];
    quads.rows(quad, rows);
    run(rows, 4);
  }
  for (int64_t r = quads.leftover_begin(); r < row_end; ++r) run(&r, 1);
}

const Q8Buffer& quantized_q8(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols) {
  thread_local Q8Buffer buffer;
  buffer.quantize(x, x_stride, n_tokens, cols);
  return buffer;
}

namespace {

// out[i * n_tokens + t] for 4-bit rows rows[i] (n_rows 1, or 4 with up to 3 tokens; quant_dot.h).
void dot_4bit_rows(const LinearWeight& weight, const int64_t* rows, int n_rows, const Q8Activations* tokens,
                   int64_t n_tokens, float* out) {
  const uint32_t* words[4];
  const uint16_t* group_scales[4];
  const uint8_t* bytes[4];
  const uint8_t* e8m0[4];
  const bool int4 = weight.format == WeightFormat::Int4Group;
  for (int i = 0; i < n_rows; ++i) {
    const int64_t stored_row = weight.row_offset + rows[i];
    if (int4) {
      words[i] =
          static_cast<const uint32_t*>(weight.data) + stored_row * (weight.stored_cols / 8) + weight.col_offset / 8;
      group_scales[i] = weight.group_scale + stored_row * (weight.stored_cols / weight.group_size) +
                        weight.col_offset / weight.group_size;
    } else {
      bytes[i] =
          static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
      e8m0[i] = weight.e8m0_scale + stored_row * (weight.stored_cols / 32) + weight.col_offset / 32;
    }
  }
  if (int4) return dot_int4_q8(words, group_scales, n_rows, weight.group_size, tokens, n_tokens, weight.cols, out);
  dot_mxfp4_q8(bytes, e8m0, n_rows, tokens, n_tokens, weight.cols, out);
}

}  // namespace

// Each quad against the tokens in groups of up to kQ8QuadTokens, the later groups finding the
// quad's weights in L1; leftover rows one at a time, tokens in groups of up to kQ8MaxTokens.
void q8_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& buffer,
                 int64_t n_tokens, float* y, int64_t y_stride) {
  Q8Activations tokens[kQ8MaxTokens];
  float out[4 * kQ8MaxTokens];
  const auto run = [&](const int64_t* rows, int n_rows, int64_t first_token, int64_t group) {
    const int64_t count = std::min(group, n_tokens - first_token);
    for (int64_t t = 0; t < count; ++t) tokens[t] = buffer.token(first_token + t);
    dot_4bit_rows(weight, rows, n_rows, tokens, count, out);
    for (int k = 0; k < n_rows; ++k)
      for (int64_t t = 0; t < count; ++t) y[(first_token + t) * y_stride + rows[k] - row_begin] = out[k * count + t];
  };
  const SpreadQuads quads(row_begin, row_end);
  for (int64_t quad = 0; quad < quads.quarter; ++quad) {
    int64_t rows[4];
    quads.rows(quad, rows);
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kQ8QuadTokens) run(rows, 4, t0, kQ8QuadTokens);
  }
  for (int64_t r = quads.leftover_begin(); r < row_end; ++r)
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kQ8MaxTokens) run(&r, 1, t0, kQ8MaxTokens);
}

namespace {

// y[t * y_stride + y_col[k]] for 4 rows w[k] and kTokens tokens x + t * x_stride.
template <int kTokens, class Element>
void rows_x4_tokens(const Element* const w[4], const float* x, int64_t x_stride, float* y, int64_t y_stride,
                    const int64_t y_col[4], int64_t cols) {
  const float* xs[kTokens];
  for (int t = 0; t < kTokens; ++t) xs[t] = x + t * x_stride;
  float out[4 * kTokens];
  simd::dot_4xn<kTokens>(w, xs, cols, out);
  for (int k = 0; k < 4; ++k)
    for (int t = 0; t < kTokens; ++t) y[t * y_stride + y_col[k]] = out[k * kTokens + t];
}

// Several tokens: spread quads of rows x 3 tokens per inner loop (2 or 1 for the last
// tokens), each quad read once for all the tokens. BF16 rows are widened in registers; other
// formats are dequantized to fp32 rows first (once per quad, for all the tokens). Leftover rows
// go one dot at a time.
template <class Element>
void rows_x4_all_tokens(const Element* const w[4], const float* x, int64_t x_stride, int64_t n_tokens, float* y,
                        int64_t y_stride, const int64_t y_col[4], int64_t cols) {
  int64_t t = 0;
  for (; t + 3 <= n_tokens; t += 3)
    rows_x4_tokens<3>(w, x + t * x_stride, x_stride, y + t * y_stride, y_stride, y_col, cols);
  if (n_tokens - t == 2) rows_x4_tokens<2>(w, x + t * x_stride, x_stride, y + t * y_stride, y_stride, y_col, cols);
  if (n_tokens - t == 1) rows_x4_tokens<1>(w, x + t * x_stride, x_stride, y + t * y_stride, y_stride, y_col, cols);
}

}  // namespace

void few_token_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                        int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t cols = weight.cols;
  float* scratch = row_scratch(4 * cols);
  const SpreadQuads quads(row_begin, row_end);
  for (int64_t quad = 0; quad < quads.quarter; ++quad) {
    int64_t y_col[4];
    for (int k = 0; k < 4; ++k) y_col[k] = quads.row(quad, k) - row_begin;
    if (weight.format == WeightFormat::BF16) {
      const uint16_t* w[4];
      for (int k = 0; k < 4; ++k) w[k] = row_data<uint16_t>(weight, quads.row(quad, k));
      rows_x4_all_tokens(w, x, x_stride, n_tokens, y, y_stride, y_col, cols);
      continue;
    }
    const float* w[4];
    for (int k = 0; k < 4; ++k) {
      if (weight.format == WeightFormat::F32) {
        w[k] = row_data<float>(weight, quads.row(quad, k));
      } else {
        dequantize_row(weight, quads.row(quad, k), scratch + k * cols);
        w[k] = scratch + k * cols;
      }
    }
    rows_x4_all_tokens(w, x, x_stride, n_tokens, y, y_stride, y_col, cols);
  }
  for (int64_t r = quads.leftover_begin(); r < row_end; ++r) {
    dequantize_row(weight, r, scratch);
    for (int64_t t = 0; t < n_tokens; ++t)
      y[t * y_stride + (r - row_begin)] = simd::dot_f32(scratch, x + t * x_stride, cols);
  }
}

void linear_transposed_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* coef,
                            int64_t coef_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (weight.format == WeightFormat::BF16) {  // widened in registers, rows in spread quads
    const SpreadQuads quads(row_begin, row_end);
    for (int64_t quad = 0; quad < quads.quarter; ++quad) {
      const uint16_t* w[4];
      for (int k = 0; k < 4; ++k) w[k] = row_data<uint16_t>(weight, quads.row(quad, k));
      for (int64_t t = 0; t < n_tokens; ++t) {
        float quad_coef[4];
        for (int k = 0; k < 4; ++k) quad_coef[k] = coef[t * coef_stride + quads.row(quad, k) - row_begin];
        simd::axpy_bf16_x4(quad_coef, w, y + t * y_stride, weight.cols);
      }
    }
    for (int64_t r = quads.leftover_begin(); r < row_end; ++r)
      for (int64_t t = 0; t < n_tokens; ++t)
        simd::axpy_bf16(coef[t * coef_stride + r - row_begin], row_data<uint16_t>(weight, r), y + t * y_stride,
                        weight.cols);
    return;
  }
  float* w = row_scratch(weight.cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    dequantize_row(weight, r, w);
    for (int64_t t = 0; t < n_tokens; ++t)
      simd::axpy(coef[t * coef_stride + r - row_begin], w, y + t * y_stride, weight.cols);
  }
}

}  // namespace MLASERVE_KERNELS_NS
