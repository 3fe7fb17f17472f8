// A weight's values in fp32, a row or part of one at a time, for every stored format: the
// kernels that do not read a format natively (few-token dots, the packed GEMM) decode with these.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// out[c] = W[row, c] in fp32. out: [W.cols].
void dequantize_row(const LinearWeight& weight, int64_t row, float* out);

// out[c - col_begin] = W[row, c] for c in [col_begin, col_end). For INT4 and MXFP4 the range
// starts and ends on a scale group's boundary (or at W.cols).
void dequantize_row_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out);

}  // namespace MLASERVE_KERNELS_NS
