// Attention kernels for MLA, in fp32.
#pragma once
#include <cstdint>

#include "kernels/latent_cache_view.h"

namespace mlaserve {

// Expanded (per-head K/V) causal attention, used for prefill.
struct CausalAttentionParams {
  const float* q = nullptr;  // [n_queries, n_heads, head_dim_qk]
  const float* k = nullptr;  // [n_keys, n_heads, head_dim_qk]
  const float* v = nullptr;  // [n_keys, n_heads, head_dim_v]
  float* out = nullptr;      // [n_queries, n_heads, head_dim_v]
  int64_t n_queries = 0;
  int64_t n_keys = 0;        // query i sits at position n_keys - n_queries + i
  int64_t n_heads = 0;
  int64_t head_dim_qk = 0;
  int64_t head_dim_v = 0;
  float softmax_scale = 1.0f;
};
void causal_attention(const CausalAttentionParams& params);

// Absorbed MLA attention over the latent cache (MQA with one latent_dim-wide key shared by
// all heads): score[h, s] = scale * (q_latent[h] . c[s] + q_pe[h] . k_pe[s]),
// out_latent[h] = sum_s softmax(score[h])[s] * c[s].
struct MlaAbsorbedParams {
  const float* q_latent = nullptr;  // [n_queries, n_heads, kv_lora_rank]
  const float* q_pe = nullptr;      // [n_queries, n_heads, qk_rope_head_dim], rotated
  float* out_latent = nullptr;      // [n_queries, n_heads, kv_lora_rank]
  LatentCacheView cache;
  int64_t layer = 0;
  int64_t n_queries = 0;
  int64_t first_position = 0;       // query i attends to positions [0, first_position + i]
  int64_t n_heads = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_rope_head_dim = 0;
  float softmax_scale = 1.0f;
};
void mla_absorbed_attention(const MlaAbsorbedParams& params);

}  // namespace mlaserve
