// BF16 panels against tokens with AVX512_BF16's vdpbf16ps, for hosts without AMX (Zen 4, Zen 5):
// one instruction multiplies 16 rows' column pairs by a token's broadcast pair, 32 multiply-adds,
// twice the fp32 FMA's 16 on those cores (a GEMM's loop nest from 16 tokens, each panel
// streamed over its depth below: decode). The activations are rounded to bf16
// (--bf16-terms 1, as llama.cpp's BF16 path does). A second bf16 term (16 of x's 24 significand
// bits) doubles the dots and runs no faster than the exact fp32 GEMM (packed_gemm.h), so
// --bf16-terms 2 and 3 keep that one.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// Whether bf16_dot_panel_rows is built (the avx512 kernel build).
bool bf16_dot_gemm_built();

// y[t * y_stride + (r - row_begin)] = sum_c bf16(x[t * x_stride + c]) * W[r, c] for r in
// [row_begin, row_end) and t < n_tokens, on the calling thread, W a Bf16Panels weight and bf16()
// the round to nearest even. Each (row, token) sum is one chain over the column pairs of each
// 256-column piece, the pieces added in turn, so a token gets the same bits in any batch this
// kernel runs.
void bf16_dot_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                         int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// The same over panels that are not a LinearWeight (the prefill attention's keys and values):
// panel p of the Bf16Panels layout at stored + p * panel_words, its first `cols` columns used
// (column `cols`, read when it is odd, finite).
void bf16_dot_stored_rows(const uint16_t* stored, int64_t panel_words, int64_t cols, int64_t row_begin, int64_t row_end,
                          const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
