// Attention kernels for MLA, in fp32.
#pragma once
#include <cstdint>


namespace mlaserve {

// p[i] = exp(p[i] - max) / sum, in place (shared by the attention kernels).
void softmax_in_place(float* p, int64_t n);

// A head's keys and values as the fp32 panels the attention's two GEMMs read as stored
// (fp32_panel_rows): keys in panels of 16 keys, [key / 16][head_dim_qk][key % 16], for the
// scores; values in panels of 16 features, [d / 16][n_keys][d % 16], for the output. Zero past
// the last key (keys) and past head_dim_v (values).
constexpr int64_t kAttentionPanel = 16;
inline int64_t round_up_to_panel(int64_t n) { return (n + kAttentionPanel - 1) / kAttentionPanel * kAttentionPanel; }
inline int64_t key_panels_floats(int64_t n_keys, int64_t head_dim_qk) { return round_up_to_panel(n_keys) * head_dim_qk; }
inline int64_t key_panel_index(int64_t key, int64_t d, int64_t head_dim_qk) {
  return (key / kAttentionPanel * head_dim_qk + d) * kAttentionPanel + key % kAttentionPanel;
}
inline int64_t value_panels_floats(int64_t n_keys, int64_t head_dim_v) { return round_up_to_panel(head_dim_v) * n_keys; }
inline int64_t value_panel_index(int64_t key, int64_t d, int64_t n_keys) {
  return (d / kAttentionPanel * n_keys + key) * kAttentionPanel + d % kAttentionPanel;
}

// Expanded (per-head K/V) causal attention, used for prefill.
struct CausalAttentionParams {
  const float* q = nullptr;         // [n_queries, n_heads, head_dim_qk]
  const float* k_panels = nullptr;  // [n_heads][key_panels_floats(n_keys, head_dim_qk)]
  const float* v_panels = nullptr;  // [n_heads][value_panels_floats(n_keys, head_dim_v)]
  float* out = nullptr;             // [n_queries, n_heads, head_dim_v]
  int64_t n_queries = 0;
  int64_t n_keys = 0;        // query i sits at position n_keys - n_queries + i
  int64_t n_heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  float softmax_scale = 1.0f;
};
void causal_attention(const CausalAttentionParams& params);

}  // namespace mlaserve
