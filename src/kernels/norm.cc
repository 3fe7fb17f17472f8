#include "kernels/norm.h"

#include <cmath>

#include "kernels/simd.h"

namespace mlaserve {

void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t n_rows, int64_t dim,
              double eps, float* out, int64_t out_stride) {
  for (int64_t row = 0; row < n_rows; ++row) {
    const float* in = x + row * x_stride;
    float* result = out + row * out_stride;
    const float mean_square = simd::dot_f32(in, in, dim) / float(dim);
    const float inverse_rms = 1.0f / std::sqrt(mean_square + float(eps));
    for (int64_t i = 0; i < dim; ++i) result[i] = in[i] * inverse_rms * weight[i];
  }
}

}  // namespace mlaserve
