// Many tokens against one weight matrix (prefill, large batches): a packed-panel GEMM in the
// manner of GotoBLAS / BLIS. Weights are decoded to fp32 once per panel and reused by every
// token, so any stored format runs at the FMA rate rather than at its decode rate; BF16
// weights repacked at load (Bf16Panels) skip the decoding and feed the kernel directly.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// Columns one FMA chain covers before its sum is added to the output's: every BF16 panel
// kernel (the GEMM blocks here, the few-token dots of bf16_panel_decode) sums a (row, token)
// in these pieces, in the same order, so a token gets the same bits in any batch.
constexpr int64_t kPackedGemmDepth = 256;

// y[t * y_stride + (r - row_begin)] = sum_c x[t * x_stride + c] * W[r, c] for r in
// [row_begin, row_end) and t < n_tokens, on the calling thread. Any weight format; for INT4
// the column depth (256) must be a whole number of groups (group sizes dividing 256).
void packed_gemm_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride);

// The same for a Bf16Panels weight (any number of tokens): the stored panels feed the kernel
// directly, widened in registers.
void bf16_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride);

// The same for a matrix the caller lays out as fp32 panels (the expanded prefill attention's
// keys and values): panel p holds rows [16p, 16p + 16) as [column][16] floats from
// panels + p * panel_stride (panel_stride >= 16 * cols); y gets rows [0, rows), for columns
// [0, cols). A last panel's rows past `rows` are read but not written (the caller
// zero-fills them: stale lanes could hold denormals, which slow the FMAs). Any number of tokens.
void fp32_panel_rows(const float* panels, int64_t panel_stride, int64_t rows, int64_t cols, const float* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
