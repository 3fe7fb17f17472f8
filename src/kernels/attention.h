// Attention kernels for MLA, in fp32 (the prefill's two products on vdpbf16ps with
// --bf16-terms 1).
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace mlaserve {

// A head's keys and values as the fp32 panels the attention's two GEMMs read as stored
// (fp32_panel_rows): keys in panels of 16 keys, [key / 16][head_dim_qk][key % 16], for the
// scores; values in panels of 16 features, [d / 16][n_keys][d % 16], for the output. Zero past
// the last key (keys) and past head_dim_v (values).
constexpr int64_t kAttentionPanel = 16;
inline int64_t round_up_to_panel(int64_t n) { return (n + kAttentionPanel - 1) / kAttentionPanel * kAttentionPanel; }
inline int64_t key_panels_floats(int64_t n_keys, int64_t head_dim_qk) {
  return round_up_to_panel(n_keys) * head_dim_qk;
}
inline int64_t key_panel_index(int64_t key, int64_t d, int64_t head_dim_qk) {
  return (key / kAttentionPanel * head_dim_qk + d) * kAttentionPanel + key % kAttentionPanel;
}
inline int64_t value_panels_floats(int64_t n_keys, int64_t head_dim_v) {
  return round_up_to_panel(head_dim_v) * n_keys;
}
inline int64_t value_panel_index(int64_t key, int64_t d, int64_t n_keys) {
  return (d / kAttentionPanel * n_keys + key) * kAttentionPanel + d % kAttentionPanel;
}

// The same panels as bf16 in the Bf16Panels layout (weight.h), for the vdpbf16ps GEMM
// (bf16_dot_gemm.h) where it runs (prefill_attention_on_bf16_dot, dispatch.h): keys as the rows
// of a [n_keys, head_dim_qk] weight, values as the rows of [head_dim_v, n_keys] (transposed),
// each rounded to nearest even; the column past the last (head_dim_qk or n_keys), read when
// that is odd, zero.
inline int64_t key_pair_panels_words(int64_t n_keys, int64_t head_dim_qk) {
  return round_up_to_panel(n_keys) / kAttentionPanel * bf16_panel_words(head_dim_qk);
}
inline int64_t key_pair_index(int64_t key, int64_t d, int64_t head_dim_qk) {
  return key / kAttentionPanel * bf16_panel_words(head_dim_qk) + bf16_panel_index(key % kAttentionPanel, d);
}
inline int64_t value_pair_panels_words(int64_t n_keys, int64_t head_dim_v) {
  return round_up_to_panel(head_dim_v) / kAttentionPanel * bf16_panel_words(n_keys);
}
inline int64_t value_pair_index(int64_t key, int64_t d, int64_t n_keys) {
  return d / kAttentionPanel * bf16_panel_words(n_keys) + bf16_panel_index(d % kAttentionPanel, key);
}

// Expanded (per-head K/V) causal attention, used for prefill: on the fp32 panels, or, where
// k_pairs and v_pairs are set, on the bf16 ones (queries and probabilities rounded to bf16).
// The panels may hold a range of a longer context's keys (key_position, query_position): with
// row_max and row_sum set, each (query, head) gets the unnormalised softmax terms of the keys
// it sees there (out = sum exp(s - max) v, row_sum = sum exp(s - max), row_max = max s; a
// query that sees none gets zeros and -inf), which the caller merges over the ranges.
struct CausalAttentionParams {
  const float* q = nullptr;           // [n_queries, n_heads, head_dim_qk]
  const float* k_panels = nullptr;    // [n_heads][key_panels_floats(n_keys, head_dim_qk)]
  const float* v_panels = nullptr;    // [n_heads][value_panels_floats(n_keys, head_dim_v)]
  const uint16_t* k_pairs = nullptr;  // [n_heads][key_pair_panels_words(n_keys, head_dim_qk)]
  const uint16_t* v_pairs = nullptr;  // [n_heads][value_pair_panels_words(n_keys, head_dim_v)]
  float* out = nullptr;               // [n_queries, n_heads, head_dim_v]
  int64_t n_queries = 0;
  int64_t n_keys = 0;  // keys in the panels, at positions [key_position, key_position + n_keys)
  int64_t key_position = 0;
  int64_t query_position = -1;  // query i sits at position query_position + i (-1: n_keys - n_queries)
  float* row_max = nullptr;     // [n_queries, n_heads], with row_sum: the partial form above
  float* row_sum = nullptr;
  int64_t n_heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  float softmax_scale = 1.0f;
};

}  // namespace mlaserve

namespace MLASERVE_KERNELS_NS {

// p[i] = exp(p[i] - max) / sum, in place (shared by the attention kernels).
void softmax_in_place(float* p, int64_t n);

void causal_attention(const CausalAttentionParams& params);

}  // namespace MLASERVE_KERNELS_NS
