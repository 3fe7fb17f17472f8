// Many tokens against one weight matrix (prefill, large batches): a packed-panel GEMM in the
// manner of GotoBLAS / BLIS. Weights are decoded to fp32 once per panel and reused by every
// token, so any stored format runs at the FMA rate rather than at its decode rate; BF16
// weights repacked at load (Bf16Panels) skip the decoding and feed the kernel directly.
#pragma once
#include <cstdint>

#include "io/linear_weight.h"

namespace mlaserve {

// y[t * y_stride + (r - row_begin)] = sum_c x[t * x_stride + c] * W[r, c] for r in
// [row_begin, row_end) and t < n_tokens, on the calling thread. Any weight format; for INT4
// the column depth (256) must be a whole number of groups (group sizes dividing 256).
void packed_gemm_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                      int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// The same for a Bf16Panels weight (any number of tokens): the stored panels feed the kernel
// directly, widened in registers; one token streams each panel once (a GEMV).
void bf16_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// Whether linear_rows should use packed_gemm_rows for this weight (not for FP8, whose 4 x 3 dot
// blocks measured faster, nor INT4 groups that do not divide 256).
bool packed_gemm_supports(const LinearWeight& weight);

}  // namespace mlaserve
