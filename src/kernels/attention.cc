#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/bf16_dot_gemm.h"
#include "kernels/packed_gemm.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
void softmax_in_place(float* p, int64_t n) {
  const float max_score = simd::max_of(p, n);
  const float inverse = 1.0f / simd::exp_shifted(p, n, max_score);
  for (int64_t i = 0; i < n; ++i) p[i] *= inverse;
}

namespace {

// Queries a tile: the scores' GEMM then streams a head's keys once for 64 queries.
constexpr int64_t kQueryTile = 64;

// Queries [first, first + count) of one head, as two GEMMs on the packed GEMM's kernels, or on
// the vdpbf16ps one over bf16 panels (the head's key and value panels as the "weights", the
// queries and probabilities as the "tokens"): scores = Q K^T over the keys visible to the tile's last query, each row
// scaled, masked to its own causal limit and softmaxed, then out = P V. Only the tile's diagonal block computes scores
// the mask then drops (at most half of 64 x 64 a tile); no key past the tile's last query is read.
void attend_query_tile(const CausalAttentionParams& p, int64_t head, int64_t first, int64_t count,
                       std::vector<float>& scores) {
  // Query j of the tile sees the panels' keys [0, offset + first + j + 1) (clipped to n_keys).
  const int64_t offset = (p.query_position < 0 ? p.n_keys - p.n_queries : p.query_position - p.key_position);
  const int64_t n_keys = std::clamp<int64_t>(offset + first + count, 0, p.n_keys);
  const int64_t q_stride = p.n_heads * p.head_dim_qk, out_stride = p.n_heads * p.head_dim_v;
  const float* queries = p.q + first * q_stride + head * p.head_dim_qk;
  float* out = p.out + first * out_stride + head * p.head_dim_v;
  if (n_keys == 0) {  // no key of these panels is visible to the tile (partial form only)
    for (int64_t j = 0; j < count; ++j) {
      std::fill(out + j * out_stride, out + j * out_stride + p.head_dim_v, 0.0f);
      p.row_max[(first + j) * p.n_heads + head] = -INFINITY;
      p.row_sum[(first + j) * p.n_heads + head] = 0.0f;
    }
    return;
  }
  scores.resize(size_t(count * n_keys));
  if (p.k_pairs)
    bf16_dot_stored_rows(p.k_pairs + head * key_pair_panels_words(p.n_keys, p.head_dim_qk),
                         bf16_panel_words(p.head_dim_qk), p.head_dim_qk, 0, n_keys, queries, q_stride, count,
                         scores.data(), n_keys);
  else
    fp32_panel_rows(p.k_panels + head * key_panels_floats(p.n_keys, p.head_dim_qk), kAttentionPanel * p.head_dim_qk,
                    n_keys, p.head_dim_qk, queries, q_stride, count, scores.data(), n_keys);
  for (int64_t j = 0; j < count; ++j) {
    float* row = scores.data() + j * n_keys;
    const int64_t visible = std::clamp<int64_t>(offset + first + j + 1, 0, n_keys);
    for (int64_t key = 0; key < visible; ++key) row[key] *= p.softmax_scale;
    if (p.row_max) {  // the partial form: exp(s - max), unnormalised
      const float max = visible > 0 ? simd::max_of(row, visible) : -INFINITY;
      p.row_max[(first + j) * p.n_heads + head] = max;
      p.row_sum[(first + j) * p.n_heads + head] = visible > 0 ? simd::exp_shifted(row, visible, max) : 0.0f;
    } else {
      softmax_in_place(row, visible);
    }
    std::fill(row + visible, row + n_keys, 0.0f);
  }
  if (p.v_pairs)
    bf16_dot_stored_rows(p.v_pairs + head * value_pair_panels_words(p.n_keys, p.head_dim_v), bf16_panel_words(p.n_keys),
                         n_keys, 0, p.head_dim_v, scores.data(), n_keys, count, out, out_stride);
  else
    fp32_panel_rows(p.v_panels + head * value_panels_floats(p.n_keys, p.head_dim_v), kAttentionPanel * p.n_keys,
                    p.head_dim_v, n_keys, scores.data(), n_keys, count, out, out_stride);
}

}  // namespace

// Items are (head, tile of 64 queries), head-major: a thread runs a head's tiles in a row, so
// its keys and values (512 keys of small: 640 KB) stay in its L2 — item order with the head
// varying fastest had every item read all 16 heads' (10 MB, from L3). Causal work grows with
// the query's position, so a head's tiles are ordered first, last, second, second-to-last,
// ...: a range of items that splits a head still holds about its share of the visible keys.
void causal_attention(const CausalAttentionParams& params) {
  const int64_t n_tiles = (params.n_queries + kQueryTile - 1) / kQueryTile;
  thread_pool().parallel_for(n_tiles * params.n_heads, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores;  // each thread's own, reused
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item / n_tiles, slot = item % n_tiles;
      const int64_t tile = slot % 2 == 0 ? slot / 2 : n_tiles - 1 - slot / 2;
      const int64_t first = tile * kQueryTile;
      attend_query_tile(params, head, first, std::min(kQueryTile, params.n_queries - first), scores);
    }
  });
}

}  // namespace MLASERVE_KERNELS_NS
