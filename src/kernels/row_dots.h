// Linear layers as dot products of weight rows with a few tokens, for weights as stored
// (decode: one sequence, or a small batch). Memory-bound: every kernel reads each row once for
// all its tokens, rows in "spread quads" (4 rows a quarter of the range apart, 4 streams of
// loads in flight). Each takes rows [row_begin, row_end) on the calling thread and writes
// y[t * y_stride + (r - row_begin)] for t < n_tokens.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/quant_dot.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// The tokens quantized to int8 per block of 32 in this thread's buffer (reused: the decode path
// allocates nothing).
const Q8Buffer& quantized_q8(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols);

// One token, any row-major format: BF16 widened in registers, F32 as is, others dequantized a
// row at a time.
void one_token_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, float* y);

// Any number of tokens, any row-major format: 4 rows x 3 tokens per inner loop, BF16 widened in
// registers, other formats dequantized to fp32 rows once per quad.
void few_token_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                        int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// FP8 and INT8 rows for 1 to block_scaled_max_tokens() tokens, codes widened in registers
// (block_scaled_dot.h); each token gets the bits it gets alone.
void block_scaled_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                           int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

// 4-bit rows (takes_q8_activations) against the tokens quantized to int8 (any number of tokens,
// in groups of up to kQ8QuadTokens per quad of rows).
void q8_dot_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x, int64_t n_tokens,
                 float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
