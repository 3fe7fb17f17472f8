// y = x W^T for every weight format mlaserve loads, dequantizing W on the fly.
// The weight is read once per call for all tokens: the batch shares each row.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/weight.h"

namespace mlaserve {

// The vector units the kernels were built for and AMX where it runs, for the start-up log:
// e.g. "AVX-512 (BF16, VNNI), AMX tiles for GEMMs of 16+ tokens".
std::string kernel_features();

// The bf16 terms GEMMs that multiply in bf16 split each activation into (--bf16-terms): x = hi
// + mid + lo, each the bf16 rounding of what the terms before it left. 3 hold all of fp32's 24
// significand bits (exact products; the default), 2 keep 16 (each x within 2^-16 of itself,
// relative), 1 rounds x to bf16 (2^-8, as llama.cpp's and SGLang's bf16 GEMMs do). Where AMX
// runs, every GEMM on its tiles (16+ tokens) takes them; without it, on AVX512_BF16 hosts, 1
// sends BF16 panels of 2+ tokens to vdpbf16ps (bf16_dot_gemm.h), and 2 and 3 keep the exact
// fp32 GEMM.
// Set before any kernel runs (a command-line option); throws outside 1-3.
void set_bf16_activation_terms(int terms);
int bf16_activation_terms();

// y[t, r] = sum_c x[t, c] * W[r, c] for t < n_tokens, all rows, threaded over rows.
//   x: [n_tokens, W.cols] contiguous; y: [n_tokens, W.rows] contiguous.
void linear(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y);

// Same over rows [row_begin, row_end) on the calling thread only:
//   y[t * y_stride + (r - row_begin)] for r in the range.
void linear_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                 int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// y_t[c] += sum_{r in [row_begin, row_end)} coef_t[r - row_begin] * W[r, c] for n_tokens
// tokens, coef_t = coef + t * coef_stride, y_t = y + t * y_stride (the transposed product, used
// to absorb kv_b_proj's key half into the queries for MLA decode). y_t: [W.cols]. Each row is
// read once for all the tokens, and each token's sums run in the same order as alone.
void linear_transposed_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* coef,
                            int64_t coef_stride, int64_t n_tokens, float* y, int64_t y_stride);

// out[c] = W[row, c] in fp32. out: [W.cols].
void dequantize_row(const LinearWeight& weight, int64_t row, float* out);

// out[c - col_begin] = W[row, c] for c in [col_begin, col_end). For INT4 and MXFP4 the range
// starts and ends on a scale group's boundary (or at W.cols).
void dequantize_row_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out);

}  // namespace mlaserve
