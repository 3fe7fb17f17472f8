// y = x W^T for every weight format mlaserve loads, dequantizing W on the fly.
// The weight is read once per call for all tokens: the batch shares each row. linear and
// linear_rows run the kernel dispatch.h chooses.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// y[t, r] = sum_c x[t, c] * W[r, c] for t < n_tokens, all rows, threaded over rows.
//   x: [n_tokens, W.cols] contiguous; y: [n_tokens, W.rows] contiguous.
void linear(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y);

// Same over rows [row_begin, row_end) on the calling thread only:
//   y[t * y_stride + (r - row_begin)] for r in the range.
void linear_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride);

// y_t[c] += sum_{r in [row_begin, row_end)} coef_t[r - row_begin] * W[r, c] for n_tokens
// tokens, coef_t = coef + t * coef_stride, y_t = y + t * y_stride (the transposed product, used
// to absorb kv_b_proj's key half into the queries for MLA decode). y_t: [W.cols]. Each row is
// read once for all the tokens, and each token's sums run in the same order as alone.
void linear_transposed_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* coef,
                            int64_t coef_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
