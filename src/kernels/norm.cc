#include "kernels/norm.h"

#include <cmath>

#include "base/thread_pool.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

// A prefill's rows split over the pool; a decode step's few stay on the calling thread.
constexpr int64_t kRowsPerTask = 16;

void rms_norm_row(const float* in, const float* weight, int64_t dim, double eps, float* result) {
  const float mean_square = simd::dot_f32(in, in, dim) / float(dim);
  const float inverse_rms = 1.0f / std::sqrt(mean_square + float(eps));
  for (int64_t i = 0; i < dim; ++i) result[i] = in[i] * inverse_rms * weight[i];
}

}  // namespace

void rms_norm(const float* x, int64_t x_stride, const float* weight, int64_t n_rows, int64_t dim, double eps,
              float* out, int64_t out_stride) {
  thread_pool().parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t row = begin; row < end; ++row)
          rms_norm_row(x + row * x_stride, weight, dim, eps, out + row * out_stride);
      },
      kRowsPerTask);
}

void add_rms_norm(float* residual, const float* delta, const float* weight, int64_t n_rows, int64_t dim, double eps,
                  float* out) {
  thread_pool().parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end, int) {
        for (int64_t row = begin; row < end; ++row) {
          float* sum = residual + row * dim;
          const float* add = delta + row * dim;
          for (int64_t i = 0; i < dim; ++i) sum[i] += add[i];
          rms_norm_row(sum, weight, dim, eps, out + row * dim);
        }
      },
      kRowsPerTask);
}

}  // namespace mlaserve
