// Random weights of every format for the linear-kernel tests, with the exact fp32 values they
// represent (dequantised from the format definitions directly, not through the kernel's
// dequantize_row), and a float64 reference.
#pragma once
#include <cstdint>
#include <vector>

#include "io/linear_weight.h"
#include "kernels/dequantize.h"

namespace mlaserve::testing {

// A weight with its storage and the fp32 values it represents.
struct TestWeight {
  LinearWeight weight;
  std::vector<float> values;  // [rows, cols] exact dequantised values
  std::vector<uint8_t> bytes;
  std::vector<float> block_scale;
  std::vector<uint16_t> group_scale;
  std::vector<uint8_t> scales_u8;
};

// rows x cols of `format` from `seed`: FP8 with 128 x 128 block scales, INT8 with a scale per
// 1 x `group` block (per row when group does not divide cols), INT4 with groups of `group`.
TestWeight make_weight(WeightFormat format, int64_t rows, int64_t cols, uint64_t seed, int64_t group = 32);

// y[n * rows + r] = sum_c values[r, c] * x[n * cols + c], in float64.
std::vector<float> reference(const TestWeight& t, const std::vector<float>& x, int64_t n_tokens);

// The activations as the kernel sees them: for MXFP4, and INT4 in groups of whole 32-column
// blocks, each token's x rounded to int8 per block of 32 (scale max|x| / 127, round half to
// even), from that definition in column order; other formats take x as it is.
std::vector<float> kernel_input(const LinearWeight& weight, const std::vector<float>& x, int64_t cols);

}  // namespace mlaserve::testing
