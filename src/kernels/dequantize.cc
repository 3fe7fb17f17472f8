#include "kernels/dequantize.h"

#include <cstring>

#include "base/dtype.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/quant_dot.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

namespace {

// FP8 or INT8 codes times the scale of their block, one stored block of columns at a time.
void dequantize_block_scaled_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end,
                                   float* out) {
  const auto convert = weight.format == WeightFormat::Fp8Block ? fp8_to_f32 : int8_to_f32;
  const uint8_t* codes = static_cast<const uint8_t*>(weight.data) + weight.element_offset(row);
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
  const uint32_t* words =
      static_cast<const uint32_t*>(weight.data) + stored_row * (weight.stored_cols / 8) + weight.col_offset / 8;
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
constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// MXFP4: the E2M1 values times 2^(scale - 127) per 32 columns; the range starts and ends on
// 32-column boundaries.
void dequantize_mxfp4_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  const int64_t stored_row = weight.row_offset + row;
  const uint8_t* bytes =
      static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
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

}  // namespace

void dequantize_row_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  const int64_t offset = weight.element_offset(row) + col_begin, n = col_end - col_begin;
  switch (weight.format) {
    case WeightFormat::F32: std::memcpy(out, static_cast<const float*>(weight.data) + offset, size_t(n) * 4); return;
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

}  // namespace MLASERVE_KERNELS_NS
