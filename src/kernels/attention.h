// Attention kernels for MLA, in fp32.
#pragma once
#include <cstdint>


namespace mlaserve {

// p[i] = exp(p[i] - max) / sum, in place (shared by the attention kernels).
void softmax_in_place(float* p, int64_t n);

// Expanded (per-head K/V) causal attention, used for prefill.
struct CausalAttentionParams {
  const float* q = nullptr;  // [n_queries, n_heads, head_dim_qk]
  // Keys and values head-major, so that a head's rows are contiguous (the kernel works one
  // head at a time; key-major rows a whole token apart cost it TLB and cache misses).
  const float* k = nullptr;  // [n_heads, n_keys, head_dim_qk]
  const float* v = nullptr;  // [n_heads, n_keys, head_dim_v]
  float* out = nullptr;      // [n_queries, n_heads, head_dim_v]
  int64_t n_queries = 0;
  int64_t n_keys = 0;        // query i sits at position n_keys - n_queries + i
  int64_t n_heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  float softmax_scale = 1.0f;
};
void causal_attention(const CausalAttentionParams& params);

}  // namespace mlaserve
