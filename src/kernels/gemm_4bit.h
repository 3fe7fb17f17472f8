// 4-bit weights (INT4 groups, MXFP4) against many tokens (prefill, large batches) as an
// integer GEMM: the tokens' activations quantized to int8 per block of 32 (Q8Buffer, the same
// values the decode dots meet) and multiplied by the weights' codes (as unsigned integers,
// quant_dot.h) with vpdpbusd, 16 rows a register (AVX2: vpmaddubsw, 8 rows), instead of
// decoding the weights to fp32 for FMAs (docs/kernels.md, "The integer GEMM").
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"
#include "kernels/quant_dot.h"

namespace MLASERVE_KERNELS_NS {

// y[t * y_stride + (r - row_begin)] = sum_b w_scale[r][b] * (x_scale[t][b] * sum_c u[r][c] q[t][c]
//   - offset * x_scale[t][b] * sum_c q[t][c]) over the 32-column blocks b (c in the block), u
// the code as an unsigned integer (INT4: value + 8; MXFP4: 2 * E2M1 + 12, its scale halved),
// for r in [row_begin, row_end) and t < n_tokens, on the calling thread. x holds n_tokens
// tokens quantized over weight.cols columns. Needs MXFP4, or INT4 groups of whole blocks: rows
// as stored, or (with AVX2 and FMA, or AVX-512 VNNI) in 16-row panels (Int4Panels,
// Mxfp4Panels), whose partial first and last steps of a range are computed whole and stored in
// part.
void gemm_4bit_q8_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                       int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
