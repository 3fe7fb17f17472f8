#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/simd.h"

namespace mlaserve {
void softmax_in_place(float* p, int64_t n) {
  const float max_score = *std::max_element(p, p + n);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::exp(p[i] - max_score);
    sum += p[i];
  }
  const float inverse = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) p[i] *= inverse;
}

void causal_attention(const CausalAttentionParams& params) {
  const int64_t offset = params.n_keys - params.n_queries;
  const int64_t qk_stride = params.n_heads * params.head_dim_qk;
  const int64_t v_stride = params.n_heads * params.head_dim_v;
  thread_pool().parallel_for(params.n_queries * params.n_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores(static_cast<size_t>(params.n_keys));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t query = item / params.n_heads, head = item % params.n_heads;
      const int64_t n_visible = offset + query + 1;
      const float* q = params.q + query * qk_stride + head * params.head_dim_qk;
      for (int64_t key = 0; key < n_visible; ++key)
        scores[key] = params.softmax_scale *
                      simd::dot_f32(q, params.k + key * qk_stride + head * params.head_dim_qk,
                                    params.head_dim_qk);
      softmax_in_place(scores.data(), n_visible);
      float* out = params.out + query * v_stride + head * params.head_dim_v;
      std::fill(out, out + params.head_dim_v, 0.0f);
      for (int64_t key = 0; key < n_visible; ++key)
        simd::axpy(scores[key], params.v + key * v_stride + head * params.head_dim_v, out,
                   params.head_dim_v);
    }
  });
}

}  // namespace mlaserve
