#include "kernels/linear.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/amx_gemm.h"
#include "kernels/bf16_dot_gemm.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/four_bit_panels.h"
#include "kernels/gemm_4bit.h"
#include "kernels/packed_gemm.h"
#include "kernels/quant_dot.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

// Absolute position of (row, 0) of a view in its stored matrix, in elements.
int64_t element_offset(const LinearWeight& weight, int64_t row) {
  return (weight.row_offset + row) * weight.stored_cols + weight.col_offset;
}

// FP8 or INT8 codes times the scale of their block, one stored block of columns at a time.
void dequantize_block_scaled_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end,
                                   float* out) {
  const auto convert = weight.format == WeightFormat::Fp8Block ? fp8_to_f32 : int8_to_f32;
  const uint8_t* codes = static_cast<const uint8_t*>(weight.data) + element_offset(weight, row);
  const int64_t stored_blocks = (weight.stored_cols + weight.block_cols - 1) / weight.block_cols;
  const float* scales = weight.block_scale + ((weight.row_offset + row) / weight.block_rows) * stored_blocks;
  for (int64_t c = col_begin; c < col_end;) {
    const int64_t block = (weight.col_offset + c) / weight.block_cols;
    const int64_t end = std::min(col_end, (block + 1) * weight.block_cols - weight.col_offset);
    convert(codes + c, scales[block], out + (c - col_begin), end - c);
    c = end;
  }
}

// Columns [col_begin, col_end) start and end on group boundaries (views split only there).
void dequantize_int4_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  const int64_t stored_row = weight.row_offset + row;
  const uint32_t* words = static_cast<const uint32_t*>(weight.data) + stored_row * (weight.stored_cols / 8) +
                          weight.col_offset / 8;
  const uint16_t* scales = weight.group_scale + stored_row * (weight.stored_cols / weight.group_size) +
                           weight.col_offset / weight.group_size;
  for (int64_t begin = col_begin; begin < col_end; begin += weight.group_size) {
    const float scale = bf16_to_f32(scales[begin / weight.group_size]);
    for (int64_t c = begin; c < begin + weight.group_size; c += 8) {
      const uint32_t word = words[c / 8];
#if defined(__AVX2__) && defined(__FMA__)
      _mm256_storeu_ps(out + (c - col_begin), simd::int4x8_to_f32(word, scale));
#else
      for (int j = 0; j < 8; ++j) out[c - col_begin + j] = float(int((word >> (4 * j)) & 0xf) - 8) * scale;
#endif
    }
  }
}

// OCP MX: E2M1 code -> value (bit 3 the sign).
constexpr float kE2M1[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// MXFP4: the E2M1 values times 2^(scale - 127) per 32 columns; the range starts and ends on
// 32-column boundaries.
void dequantize_mxfp4_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  const int64_t stored_row = weight.row_offset + row;
  const uint8_t* bytes = static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
  const uint8_t* scales = weight.e8m0_scale + stored_row * (weight.stored_cols / 32) + weight.col_offset / 32;
  for (int64_t begin = col_begin; begin < col_end; begin += 32) {
    const float scale = e8m0_to_f32(scales[begin / 32]);
#if defined(__AVX2__) && defined(__FMA__)
    for (int64_t c = begin; c < begin + 32; c += 8) {
      uint32_t four_bytes;
      std::memcpy(&four_bytes, bytes + c / 2, 4);
      _mm256_storeu_ps(out + (c - col_begin), simd::mxfp4x8_to_f32(four_bytes, scale));
    }
#else
    for (int64_t c = begin; c < begin + 32; c += 2) {
      const uint8_t byte = bytes[c / 2];
      out[c - col_begin] = kE2M1[byte & 0xf] * scale;
      out[c - col_begin + 1] = kE2M1[byte >> 4] * scale;
    }
#endif
  }
}

// A Bf16Panels row: its pairs' words in its panel (never a view: see repack_bf16_panels).
void dequantize_bf16_panel_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end,
                                 float* out) {
  const auto* panel = static_cast<const uint16_t*>(weight.data) + row / kBf16PanelRows * bf16_panel_words(weight.cols);
  for (int64_t c = col_begin; c < col_end; ++c)
    out[c - col_begin] = bf16_to_f32(panel[bf16_panel_index(row % kBf16PanelRows, c)]);
}

// An Int4Panels or Mxfp4Panels row: its words and scales in its panel (never a view).
void dequantize_4bit_panel_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end,
                                 float* out) {
  const bool int4 = weight.format == WeightFormat::Int4Panels;
  const int64_t group = int4 ? weight.group_size : 32, panel = row / kFourBitPanelRows;
  const int64_t first_word = panel * kFourBitPanelRows * (weight.cols / 8) + row % kFourBitPanelRows;
  const int64_t first_scale = panel * kFourBitPanelRows * (weight.cols / group) + row % kFourBitPanelRows;
  const auto* words = static_cast<const uint32_t*>(weight.data) + first_word;
  for (int64_t c = col_begin; c < col_end; ++c) {
    const int code = int(words[c / 8 * kFourBitPanelRows] >> (4 * (c % 8))) & 0xf;
    const int64_t scale = first_scale + c / group * kFourBitPanelRows;
    out[c - col_begin] = int4 ? float(code - kInt4Offset) * bf16_to_f32(weight.group_scale[scale])
                              : kE2M1[code] * e8m0_to_f32(weight.e8m0_scale[scale]);
  }
}

// A per-thread row buffer for formats that are dequantized before the dot product.
float* row_scratch(int64_t cols) {
  thread_local std::vector<float> scratch;
  if (int64_t(scratch.size()) < cols) scratch.resize(size_t(cols));
  return scratch.data();
}

}  // namespace

void dequantize_row_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  const int64_t offset = element_offset(weight, row) + col_begin, n = col_end - col_begin;
  switch (weight.format) {
    case WeightFormat::F32:
      std::memcpy(out, static_cast<const float*>(weight.data) + offset, size_t(n) * 4);
      return;
    case WeightFormat::BF16: simd::widen_bf16(static_cast<const uint16_t*>(weight.data) + offset, out, n); return;
    case WeightFormat::F16: {
      const uint16_t* values = static_cast<const uint16_t*>(weight.data) + offset;
      for (int64_t c = 0; c < n; ++c) out[c] = f16_to_f32(values[c]);
      return;
    }
    case WeightFormat::Fp8Block:
    case WeightFormat::Int8Block: dequantize_block_scaled_range(weight, row, col_begin, col_end, out); return;
    case WeightFormat::Int4Group: dequantize_int4_range(weight, row, col_begin, col_end, out); return;
    case WeightFormat::Mxfp4: dequantize_mxfp4_range(weight, row, col_begin, col_end, out); return;
    case WeightFormat::Bf16Panels: dequantize_bf16_panel_range(weight, row, col_begin, col_end, out); return;
    case WeightFormat::Int4Panels:
    case WeightFormat::Mxfp4Panels: dequantize_4bit_panel_range(weight, row, col_begin, col_end, out); return;
  }
}

void dequantize_row(const LinearWeight& weight, int64_t row, float* out) {
  dequantize_row_range(weight, row, 0, weight.cols, out);
}

namespace {

// Weights whose dot products take int8-quantized activations (quant_dot.h): MXFP4, and INT4
// with groups of whole Q8 blocks (other group sizes dequantize a row at a time), unless their
// activations stay fp32 (ActivationQuant::Off: dequantized rows, as FP8's).
bool takes_q8_activations(const LinearWeight& weight) {
  if (weight.activation_quant != ActivationQuant::Int8) return false;
  return weight.format == WeightFormat::Mxfp4 ||
         (weight.format == WeightFormat::Int4Group && weight.group_size % kQ8Block == 0);
}

// out[k * n_tokens + t] = sum_c W[rows[k], c] * x_t[c] for n_rows FP8 or INT8 rows (1, or 4 read
// together) and n_tokens tokens (up to block_scaled_max_tokens()).
void dot_block_scaled_weight_rows(const LinearWeight& weight, const int64_t* rows, int n_rows,
                                  const BlockScaledActivations* const tokens[], int n_tokens, float* out) {
  const int64_t stored_blocks = (weight.stored_cols + weight.block_cols - 1) / weight.block_cols;
  const uint8_t* codes[4];
  const float* scales[4];
  for (int k = 0; k < n_rows; ++k) {
    codes[k] = static_cast<const uint8_t*>(weight.data) + element_offset(weight, rows[k]);
    scales[k] = weight.block_scale + ((weight.row_offset + rows[k]) / weight.block_rows) * stored_blocks +
                weight.col_offset / weight.block_cols;
  }
  dot_block_scaled_rows(codes, scales, n_rows, weight.col_offset % weight.block_cols, weight.block_cols, tokens,
                        n_tokens, weight.cols, out);
}

// Rows in quads a quarter of the range apart: quad i of [begin, end) is rows begin + i,
// begin + q + i, begin + 2q + i and begin + 3q + i (q = (end - begin) / 4); rows from
// begin + 4q on are left over. A memory-bound dot over 4 distant rows at once keeps 4
// independent streams of loads in flight where 4 neighbouring rows are one: BF16 5632 x 2048,
// one token, 1327 us one row at a time, 1155 us for 4 neighbours, 942 us spread (linear_bench,
// medians of 5; a plain read on this VM: ~23 GB/s from one stream a thread, 30-46 from 4).
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
  return static_cast<const Element*>(weight.data) + element_offset(weight, row);
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

// One token: decode is memory-bound, so each row is read once and bf16 widened in registers;
// BF16 and F32 rows go in spread quads.
void rows_single_token(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                       float* y) {
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

// FP8 and INT8 rows for 1 to block_scaled_max_tokens() tokens, codes widened in registers
// (block_scaled_dot.h): each token's activations prepared alone (scaled by their own power of
// two), rows in spread quads, leftover rows one at a time. A token gets the bits it gets alone
// in any such batch. (Dequantising each quad to fp32 rows for the 4 x 3 dot blocks, as before,
// read FP8 768 x 2048 at 8.3-8.8 GB/s with 2 tokens and 5632 x 2048 at 5.0-5.2 with 8, where
// one token's fused dots read 23-25; linear_bench.)
void rows_block_scaled(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
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

// The tokens quantized to int8 per block of 32 in this thread's buffer (reused: the decode path
// allocates nothing).
const Q8Buffer& quantized_q8(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols) {
  thread_local Q8Buffer buffer;
  buffer.quantize(x, x_stride, n_tokens, cols);
  return buffer;
}

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
      words[i] = static_cast<const uint32_t*>(weight.data) + stored_row * (weight.stored_cols / 8) + weight.col_offset / 8;
      group_scales[i] = weight.group_scale + stored_row * (weight.stored_cols / weight.group_size) +
                        weight.col_offset / weight.group_size;
    } else {
      bytes[i] = static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
      e8m0[i] = weight.e8m0_scale + stored_row * (weight.stored_cols / 32) + weight.col_offset / 32;
    }
  }
  if (int4) return dot_int4_q8(words, group_scales, n_rows, weight.group_size, tokens, n_tokens, weight.cols, out);
  dot_mxfp4_q8(bytes, e8m0, n_rows, tokens, n_tokens, weight.cols, out);
}

// 4-bit weights: every token's activations quantized once (per thread: a few percent of one
// row's work). Rows in spread quads (4 memory streams), each quad against the tokens in groups
// of up to kQ8QuadTokens, the later groups finding the quad's weights in L1; leftover rows one
// at a time, tokens in groups of up to kQ8MaxTokens. (Rows one at a time for 2-3 tokens, one
// stream a thread, read 15 GB/s from memory where one token's quads read 28: 768 x 2048.)
void rows_q8(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
             int64_t n_tokens, float* y, int64_t y_stride) {
  const Q8Buffer& buffer = quantized_q8(x, x_stride, n_tokens, weight.cols);
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

// From this many tokens a layer runs as a packed GEMM (packed_gemm.h). Measured (linear_bench):
// for BF16 the 4 x 3 dot blocks are as fast up to about 64 tokens (an expert's 48 tokens of a
// 512-token prefill: 112-127 vs 113-133 GFLOP/s). The 4-bit int8 dots are slower from about
// 16 tokens (INT4, 48 tokens: 74 GFLOP/s), and from there 4-bit layers run the integer GEMM
// (gemm_4bit.h) on the same int8 activations: their numbers differ between the two paths only
// by float summation order. FP8 and INT8 dequantise rows for the dot blocks, which the packed
// GEMM beats right after their fused dots end (linear_bench, AVX-512, MLASERVE_AMX=0, 48 tokens
// of 768 x 2048: FP8 145-154 -> 221-228 GFLOP/s, INT8 141-147 -> 228-236; at 8 and 15 tokens
// the fused dots win: FP8 119-124 and 123-124 against 42-43 and 103-104; an AVX2 build, 48
// tokens: FP8 157-160 -> 178-179, INT8 151-156 -> 177-179).
constexpr int64_t kPackedGemmMinTokens = 64;
constexpr int64_t kBlockScaledPackedGemmMinTokens = 16;
constexpr int64_t kIntegerGemmMinTokens = 16;

void rows_several_tokens(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
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
    for (int64_t t = 0; t < n_tokens; ++t) y[t * y_stride + (r - row_begin)] = simd::dot_f32(scratch, x + t * x_stride, cols);
  }
}

constexpr int kExactTerms = 3;  // bf16 terms that hold an fp32 activation exactly
int activation_terms = kExactTerms;

}  // namespace

void set_bf16_activation_terms(int terms) {
  MLA_CHECK(terms >= 1 && terms <= kExactTerms, "--bf16-terms must be 1, 2 or 3, got {}", terms);
  activation_terms = terms;
}

int bf16_activation_terms() { return activation_terms; }

void linear_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                 int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  if (weight.format == WeightFormat::Bf16Panels)
    return bf16_panel_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  if (is_4bit_panels(weight.format))
    return four_bit_panel_rows(weight, row_begin, row_end, quantized_q8(x, x_stride, n_tokens, weight.cols), n_tokens, y,
                               y_stride);
  const bool q8 = takes_q8_activations(weight);
  if (q8 && n_tokens >= kIntegerGemmMinTokens) {
    const Q8Buffer& buffer = quantized_q8(x, x_stride, n_tokens, weight.cols);
    if (amx_available()) return gemm_4bit_q8_rows_amx(weight, row_begin, row_end, buffer, n_tokens, y, y_stride);
    return gemm_4bit_q8_rows(weight, row_begin, row_end, buffer, n_tokens, y, y_stride);
  }
  // On AMX the tile kernel takes row-major BF16 where it would take the packed GEMM, and FP8 and
  // INT8 from 16 tokens, past their fused dots (as BF16 panels past their few-token kernels;
  // INT8 768 x 2048 at 48 tokens: 233 GFLOP/s on the packed GEMM, 467 on the tiles).
  const int64_t amx_min_tokens = is_block_scaled(weight.format) ? kAmxMinTokens : kPackedGemmMinTokens;
  if (n_tokens >= amx_min_tokens && amx_supports(weight) && amx_available())
    return linear_rows_amx(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  const int64_t packed_min_tokens = is_block_scaled(weight.format) ? kBlockScaledPackedGemmMinTokens : kPackedGemmMinTokens;
  if (n_tokens >= packed_min_tokens && packed_gemm_supports(weight))
    return packed_gemm_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  if (q8) return rows_q8(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  if (is_block_scaled(weight.format) && n_tokens <= block_scaled_max_tokens())
    return rows_block_scaled(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  if (n_tokens == 1) return rows_single_token(weight, row_begin, row_end, x, y);
  rows_several_tokens(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
}

std::string kernel_features() {
#if defined(__AVX512F__)
  std::string features = "AVX-512";
#if defined(__AVX512BF16__) && defined(__AVX512VNNI__)
  features += " (BF16, VNNI)";
#endif
#elif defined(__AVX2__) && defined(__FMA__)
  std::string features = "AVX2+FMA";
#else
  std::string features = "scalar (no AVX2: built without -march=native or for another CPU)";
#endif
  if (amx_available())
    features += fmt::format(", AMX tiles for GEMMs of 16+ tokens, activations as {} bf16 term(s) (--bf16-terms; "
                            "MLASERVE_AMX=0 turns the tiles off)",
                            bf16_activation_terms());
  else if (bf16_dot_gemm_runs())
    features += ", vdpbf16ps for BF16 panels of 2+ tokens, activations rounded to bf16 (--bf16-terms 1)";
  return features;
}

void linear(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y) {
  if (n_tokens <= 0) return;
  thread_pool().parallel_for(
      weight.rows,
      [&](int64_t begin, int64_t end, int) {
        linear_rows(weight, begin, end, x, weight.cols, n_tokens, y + begin, weight.rows);
      },
      8);
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

}  // namespace mlaserve
