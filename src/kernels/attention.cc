#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/simd.h"

namespace mlaserve {
void softmax_in_place(float* p, int64_t n) {
  const float max_score = *std::max_element(p, p + n);
  const float inverse = 1.0f / simd::exp_shifted(p, n, max_score);
  for (int64_t i = 0; i < n; ++i) p[i] *= inverse;
}

namespace {

constexpr int64_t kQueryBlock = 4;

// Queries [first, first + count) (count <= 4) of one head: scores 4 queries x 3 keys per
// register block (each key row loaded once for the 4 queries), softmax per query over its
// visible keys, then the 4 outputs accumulate the weighted value rows together. Keys past a
// query's causal limit get probability 0; no key past the block's last query is touched.
void attend_query_block(const CausalAttentionParams& p, int64_t head, int64_t first, int64_t count,
                        std::vector<float>& scores, std::vector<const float*>& values) {
  const int64_t offset = p.n_keys - p.n_queries, dim = p.head_dim_qk;
  const int64_t q_stride = p.n_heads * dim, out_stride = p.n_heads * p.head_dim_v;
  const float* head_k = p.k + head * p.n_keys * dim;
  const float* head_v = p.v + head * p.n_keys * p.head_dim_v;
  const int64_t n_keys = offset + first + count;  // visible to the block's last query
  const float* q[kQueryBlock];
  float* probs[kQueryBlock];
  float* out[kQueryBlock];
  for (int64_t j = 0; j < kQueryBlock; ++j) {
    const int64_t query = first + std::min(j, count - 1);  // a short block repeats its last query
    q[j] = p.q + query * q_stride + head * dim;
    probs[j] = scores.data() + j * p.n_keys;
    out[j] = p.out + query * out_stride + head * p.head_dim_v;
  }
  for (int64_t key = 0; key < n_keys; key += 3) {
    const float* k[3];
    for (int64_t i = 0; i < 3; ++i) k[i] = head_k + std::min(key + i, n_keys - 1) * dim;
    float dots[kQueryBlock * 3];
    simd::dot_4xn<3>(q, k, dim, dots);
    for (int64_t j = 0; j < kQueryBlock; ++j)
      for (int64_t i = 0; i < 3 && key + i < n_keys; ++i) probs[j][key + i] = p.softmax_scale * dots[j * 3 + i];
  }
  for (int64_t j = 0; j < kQueryBlock; ++j) {
    const int64_t visible = offset + first + std::min(j, count - 1) + 1;
    softmax_in_place(probs[j], visible);
    std::fill(probs[j] + visible, probs[j] + n_keys, 0.0f);
  }
  for (int64_t key = 0; key < n_keys; ++key) values[size_t(key)] = head_v + key * p.head_dim_v;
  for (int64_t j = count; j < kQueryBlock; ++j) out[j] = scores.data() + kQueryBlock * p.n_keys;  // discarded
  for (int64_t j = 0; j < kQueryBlock; ++j) std::fill(out[j], out[j] + p.head_dim_v, 0.0f);
  simd::weighted_rows_4(probs, values.data(), n_keys, out, p.head_dim_v);
}

}  // namespace

// Items are (head, block of 4 queries), head-major: a thread runs all the blocks of a head in
// a row, so that head's keys and values (512 keys of small: 640 KB) stay in its L2 — item
// order with the head varying fastest had every block read all 16 heads' (10 MB, from L3).
// Causal work grows with the query's position, so a head's blocks are ordered first, last,
// second, second-to-last, ...: a range of items that splits a head still holds about its
// share of the visible keys.
void causal_attention(const CausalAttentionParams& params) {
  const int64_t n_blocks = (params.n_queries + kQueryBlock - 1) / kQueryBlock;
  thread_pool().parallel_for(n_blocks * params.n_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores(size_t(kQueryBlock * params.n_keys + params.head_dim_v));
    std::vector<const float*> values(size_t(params.n_keys));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item / n_blocks, slot = item % n_blocks;
      const int64_t block = slot % 2 == 0 ? slot / 2 : n_blocks - 1 - slot / 2;
      const int64_t first = block * kQueryBlock;
      attend_query_block(params, head, first, std::min(kQueryBlock, params.n_queries - first), scores, values);
    }
  });
}

}  // namespace mlaserve
