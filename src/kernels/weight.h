// A weight matrix [rows = out_features, cols = in_features] kept in its stored format, as the
// kernels read it: the formats, the panel layouts the loader repacks into, and views of part of
// a stored matrix (tensor-parallel shards). The kernels dequantize on the fly, so a 4-bit
// checkpoint costs ~4 bits a weight of memory. The loader (io/linear_weight.h) fills these.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlaserve {

enum class WeightFormat {
  F32,
  F16,
  BF16,
  Fp8Block,     // F8_E4M3 [rows, cols] x weight_scale_inv F32 per block_rows x block_cols block
  Int8Block,    // compressed-tensors int-quantized: I8 [rows, cols] x weight_scale per 1 x block_cols
                // block (strategy channel: block_cols = cols; group: the group size)
  Int4Group,    // compressed-tensors pack-quantized: 8 offset-coded nibbles per int32, bf16 scales
  Mxfp4,        // compressed-tensors mxfp4-pack-quantized: 2 E2M1 nibbles per byte, E8M0 scale per 32
  Bf16Panels,   // BF16 copied at load into the CPU kernels' layout (see repack_bf16_panels)
  Int4Panels,   // Int4Group copied at load into 16-row panels (see repack_4bit_panels)
  Mxfp4Panels,  // Mxfp4 likewise
};

// FP8 and INT8: one byte an element with a float scale per block_rows x block_cols block.
inline bool is_block_scaled(WeightFormat format) {
  return format == WeightFormat::Fp8Block || format == WeightFormat::Int8Block;
}

// Bf16Panels: rows in panels of 16, each panel stored as column pairs, [pair][row][2]: word
// (c / 2) * 32 + 2 * i + c % 2 of a panel holds row i's column c (bf16_panel_index). A 32-bit
// lane holds one row's two neighbouring columns, so a shift and a mask widen a load into the
// fp32 rows of both columns, and 16 pairs (32 columns, 1 KB) are an AMX B tile as stored.
// Panels are whole 32-column steps (bf16_panel_words); rows past `rows` and columns past
// `cols` are zero.
constexpr int64_t kBf16PanelRows = 16;
constexpr int64_t kBf16PanelStepCols = 32;
inline int64_t bf16_panel_words(int64_t cols) {
  return (cols + kBf16PanelStepCols - 1) / kBf16PanelStepCols * kBf16PanelStepCols * kBf16PanelRows;
}
inline int64_t bf16_panel_index(int64_t row_in_panel, int64_t col) {
  return col / 2 * 2 * kBf16PanelRows + 2 * row_in_panel + col % 2;
}

// Int4Panels and Mxfp4Panels: rows in panels of 16, each panel the 16 rows' 32-bit words of
// 8 codes side by side, [word][row]: word (p * cols / 8 + j) * 16 + i of data is row 16p + i's
// word j (columns 8j..8j+7, column c in nibble c % 8, as stored), so 64 bytes hold 16 rows'
// codes of 8 columns — one vpdpbusd operand a nibble half (the integer GEMM's step, without
// regrouping). The scales likewise, [panel][group][row]: INT4 a bf16 per group_size columns
// (group_scale), MXFP4 an E8M0 byte per 32 (e8m0_scale). Rows past `rows` have zero codes and
// scales; cols is a multiple of 32.
constexpr int64_t kFourBitPanelRows = 16;
inline bool is_4bit_panels(WeightFormat format) {
  return format == WeightFormat::Int4Panels || format == WeightFormat::Mxfp4Panels;
}
inline int64_t four_bit_panels(int64_t rows) { return (rows + kFourBitPanelRows - 1) / kFourBitPanelRows; }

const char* weight_format_name(WeightFormat format);

// What INT4 and MXFP4 weights' products take (`--act-quant`): Int8 rounds each token's
// activations to int8 per 32 columns (scale max|x| / 127) for integer dot products, as
// llama.cpp's Q4 kernels do (the fast default); Off keeps them fp32 against the dequantized
// weight, the exact maths of the stored model (slower: the kernels dequantize rows first).
enum class ActivationQuant { Int8, Off };
ActivationQuant activation_quant_from_name(const std::string& name);  // "int8" | "off"

// A span of stored bytes.
struct ByteRange {
  const void* begin = nullptr;
  size_t bytes = 0;
};

struct LinearWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  // F32/F16/BF16/Fp8Block: [rows, cols] of the element type; Int4Group: int32 [rows, cols / 8],
  // element c of a row in bits 4*(c%8) of word c/8, stored as q + 8 (q in [-8, 7]); Mxfp4:
  // uint8 [rows, cols / 2], element c in the low nibble of byte c/2 when c is even.
  const void* data = nullptr;
  const float* block_scale = nullptr;  // Fp8Block, Int8Block: [ceil(rows/block_rows), ceil(cols/block_cols)]
  int64_t block_rows = 128, block_cols = 128;
  const uint16_t* group_scale = nullptr;                     // Int4Group: bf16 [rows, cols / group_size]
  const uint8_t* e8m0_scale = nullptr;                       // Mxfp4: [rows, cols / 32], scale 2^(s - 127)
  int64_t group_size = 32;                                   // Int4Group's group; Mxfp4: always 32
  ActivationQuant activation_quant = ActivationQuant::Int8;  // Int4Group and Mxfp4 only
  // A weight may be a view of part of a stored matrix (a tensor-parallel shard): rows
  // [row_offset, row_offset + rows) and columns [col_offset, col_offset + cols) of a stored
  // matrix with stored_cols columns. Scales are indexed in stored coordinates.
  int64_t stored_cols = 0;
  int64_t row_offset = 0, col_offset = 0;

  // Absolute position of (row, 0) of this view in its stored matrix, in elements.
  int64_t element_offset(int64_t row) const { return (row_offset + row) * stored_cols + col_offset; }
  size_t bytes() const;  // bytes of this view, scales included
  // The stored bytes the kernels read for this view: its rows of the data and of the scales
  // (whole stored rows for a column view, whose rows' pages the kernels touch anyway).
  std::vector<ByteRange> stored_ranges() const;
  ByteRange stored_codes() const;  // the first of stored_ranges(): the values, without scales
  // Whether the view's columns all lie in one scale block (INT8 per channel, or a narrow view).
  bool one_scale_block() const;
  LinearWeight rows_view(int64_t begin, int64_t end) const;  // output features [begin, end)
  LinearWeight cols_view(int64_t begin, int64_t end) const;  // input features [begin, end)
};

// Which weights the kernels take (the dispatcher's choice and the kernels' own checks).
// Weights whose dot products take int8-quantized activations (quant_dot.h): MXFP4, and INT4
// with groups of whole 32-column Q8 blocks (other group sizes dequantize a row at a time),
// unless their activations stay fp32 (ActivationQuant::Off: dequantized rows, as FP8's).
bool takes_q8_activations(const LinearWeight& weight);
// The AMX
// tile GEMM: BF16 panels, row-major BF16 (kv_b_proj, a tied LM head, --no-repack), INT8 with a
// scale a row (strategy channel) or a scale per group of whole kAmxStepCols-column steps, and
// FP8 — views starting on a scale group's or block's first column.
constexpr int64_t kAmxStepCols = 32;  // columns one tile product consumes
bool amx_supports(const LinearWeight& weight);
// The packed GEMM: not INT4 groups that do not divide its depth.
bool packed_gemm_supports(const LinearWeight& weight);

}  // namespace mlaserve
