// 4-bit weights in 16-row panels (Int4Panels, Mxfp4Panels: repack_4bit_panels) against tokens
// quantized to int8 per block of 32 (Q8Buffer), a few tokens at a time (decode; more tokens run
// the integer GEMM, which reads these panels too): each panel's step (16 rows x 4 columns, 64
// bytes of codes once its nibbles are split) is one vpdpbusd per token (AVX2: each half of it a
// vpmaddubsw over 8 rows), as in the integer GEMM (gemm_4bit.h), which regroups row-major rows
// into such steps on every call.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"
#include "kernels/quant_dot.h"

namespace MLASERVE_KERNELS_NS {

// Whether the panel kernels are built: AVX-512 VNNI, or AVX2 and FMA.
bool four_bit_panels_built();

// The most tokens four_bit_panel_rows takes (decode: one sequence or a small batch); more run
// as the integer GEMM (gemm_4bit.h), which reads these panels too.
inline constexpr int64_t kFourBitPanelMaxTokens = 8;

// Rows in one step of the integer GEMM on this build: a register of int32 lanes, 16 with
// AVX-512 VNNI (a whole panel), 8 with AVX2 (half of one).
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
inline constexpr int kFourBitStepRows = 16;
#else
inline constexpr int kFourBitStepRows = 8;
#endif

// y[t * y_stride + r - row_begin] = W[r] . x_t for rows [row_begin, row_end) and the n_tokens
// (at most kFourBitPanelMaxTokens) tokens of x, W an Int4Panels or Mxfp4Panels weight. Each (row, token) sum takes the
// integer GEMM's steps in its order — per block an exact int32 sum, then fma(fma(sum, x_scale, -offset * x_scale *
// sum(q)), w_scale, acc) over chunks of 32 blocks, the chunks added in turn — so a token gets the same bits alone, in
// any batch, and as gemm_4bit_q8_rows gives it on the row-major weight.
void four_bit_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                         int64_t n_tokens, float* y, int64_t y_stride);

// The integer GEMM's steps of rows [first_row, first_row + kFourBitStepRows) (first_row a
// multiple of kFourBitStepRows) over blocks [first_block, first_block + n_blocks): steps[b][s]
// the rows' unsigned codes of step s (MXFP4 through kE2M1DoubledPlus12), and scales[b] their
// block scales in fp32 (gemm_4bit.cc's Panel, built without regrouping). Needs AVX2 and FMA.
void four_bit_panel_steps(const LinearWeight& weight, int64_t first_row, int64_t first_block, int64_t n_blocks,
                          uint8_t (*steps)[8][4 * kFourBitStepRows], float (*scales)[kFourBitStepRows]);

}  // namespace MLASERVE_KERNELS_NS
