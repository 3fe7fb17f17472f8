// RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight, in fp32 (HF DeepseekV3RMSNorm).
#pragma once
#include <cstdint>

namespace mlaserve {

// x, out: [n_rows, dim] with row strides; weight: [dim]. out may alias x. Rows split over the
// thread pool from 16 on.
void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t n_rows, int64_t dim, double eps,
              float* out, int64_t out_stride);

// residual += delta, then out = rms_norm(residual): a decoder layer's residual add fused with
// the norm that follows it, one pass over each row. All three [n_rows, dim], contiguous; the
// results are the same bits as the add followed by rms_norm.
void add_rms_norm(float* residual, const float* delta, const float* weight, int64_t n_rows, int64_t dim, double eps,
                  float* out);

}  // namespace mlaserve
