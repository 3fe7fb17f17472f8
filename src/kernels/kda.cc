#include "kernels/kda.h"

#include <cmath>
#include <vector>

#include "kernels/simd.h"

namespace mlaserve {

void kda_recurrent_step(float* state, const float* q, const float* k, const float* v, const float* g,
                        float beta, int64_t key_dim, int64_t value_dim, float* out) {
  thread_local std::vector<float> delta;
  delta.assign(v, v + value_dim);  // v - S^T k after the decay
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    const float decay = std::exp(g[i]);
    for (int64_t j = 0; j < value_dim; ++j) row[j] *= decay;
    simd::axpy(-k[i], row, delta.data(), value_dim);
  }
  for (int64_t j = 0; j < value_dim; ++j) delta[size_t(j)] *= beta;
  for (int64_t j = 0; j < value_dim; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    simd::axpy(k[i], delta.data(), row, value_dim);
    simd::axpy(q[i], row, out, value_dim);
  }
}

void l2_normalize(float* x, int64_t n, float scale) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const float factor = scale / float(std::sqrt(sum + 1e-6));
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace mlaserve
