// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, in fp32 (HF DeepseekV3RMSNorm).
#pragma once
#include <cstdint>

namespace mlaserve {

// x, out: [n_rows, dim] with row strides; weight: [dim]. out may alias x.
void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t n_rows, int64_t dim,
              double eps, float* out, int64_t out_stride);

}  // namespace mlaserve
