#include "model/mla.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace mlaserve {
namespace {

// Below this many new tokens the absorbed form is cheaper than expanding K/V for the prefix.
constexpr int64_t kExpandedMinTokens = 16;

// q: [n_tokens, H * qk_head_dim], with rope applied to each head's pe slice.
std::vector<float> project_queries(const MlaShape& shape, const MlaWeights& weights,
                                   const RotaryEmbedding& rope, const MlaInput& input) {
  const int64_t n_tokens = input.n_tokens, qk_head_dim = shape.qk_head_dim();
  std::vector<float> q(size_t(n_tokens * shape.n_heads * qk_head_dim));
  if (weights.q_proj) {
    linear(*weights.q_proj, input.x, n_tokens, q.data());
  } else {
    const int64_t q_lora_rank = weights.q_a_proj->rows;
    std::vector<float> q_a(size_t(n_tokens * q_lora_rank));  // [n_tokens, q_lora_rank]
    linear(*weights.q_a_proj, input.x, n_tokens, q_a.data());
    rms_norm(q_a.data(), q_lora_rank, weights.q_a_layernorm, n_tokens, q_lora_rank, shape.norm_eps,
             q_a.data(), q_lora_rank);
    linear(*weights.q_b_proj, q_a.data(), n_tokens, q.data());
  }
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < shape.n_heads; ++h)
      rope.apply(q.data() + (t * shape.n_heads + h) * qk_head_dim + shape.qk_nope_head_dim,
                 input.start_position + t);
  return q;
}

// kv_a_proj_with_mqa -> [compressed_kv | k_pe]; norm the first, rotate the second, cache both.
void write_latents(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope,
                   const MlaInput& input) {
  const int64_t latent_dim = shape.latent_dim();
  std::vector<float> latent(size_t(input.n_tokens * latent_dim));  // [n_tokens, latent_dim]
  linear(weights.kv_a_proj_with_mqa, input.x, input.n_tokens, latent.data());
  for (int64_t t = 0; t < input.n_tokens; ++t) {
    float* row = input.cache.row(input.layer, input.start_position + t);
    const float* fresh = latent.data() + t * latent_dim;
    rms_norm(fresh, latent_dim, weights.kv_a_layernorm, 1, shape.kv_lora_rank, shape.norm_eps, row,
             latent_dim);
    std::memcpy(row + shape.kv_lora_rank, fresh + shape.kv_lora_rank,
                size_t(shape.qk_rope_head_dim) * sizeof(float));
    rope.apply(row + shape.kv_lora_rank, input.start_position + t);
  }
}

// attn: [n_tokens, H * v_head_dim]
void attend_expanded(const MlaShape& shape, const MlaWeights& weights, const MlaInput& input,
                     const std::vector<float>& q, float* attn) {
  const int64_t n_keys = input.start_position + input.n_tokens, n_heads = shape.n_heads;
  const int64_t nope = shape.qk_nope_head_dim, rope_dim = shape.qk_rope_head_dim;
  const int64_t v_dim = shape.v_head_dim, qk_dim = shape.qk_head_dim(), kv_dim = nope + v_dim;
  std::vector<float> latents(size_t(n_keys * shape.kv_lora_rank));  // [n_keys, kv_lora_rank]
  for (int64_t s = 0; s < n_keys; ++s)
    std::memcpy(latents.data() + s * shape.kv_lora_rank, input.cache.row(input.layer, s),
                size_t(shape.kv_lora_rank) * sizeof(float));
  std::vector<float> kv(size_t(n_keys * n_heads * kv_dim));  // [n_keys, H, nope + v]
  linear(weights.kv_b_proj, latents.data(), n_keys, kv.data());
  std::vector<float> k(size_t(n_keys * n_heads * qk_dim));  // [n_keys, H, nope + rope]
  std::vector<float> v(size_t(n_keys * n_heads * v_dim));   // [n_keys, H, v]
  for (int64_t s = 0; s < n_keys; ++s) {
    const float* k_pe = input.cache.row(input.layer, s) + shape.kv_lora_rank;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* kv_head = kv.data() + (s * n_heads + h) * kv_dim;
      float* k_head = k.data() + (s * n_heads + h) * qk_dim;
      std::memcpy(k_head, kv_head, size_t(nope) * sizeof(float));
      std::memcpy(k_head + nope, k_pe, size_t(rope_dim) * sizeof(float));
      std::memcpy(v.data() + (s * n_heads + h) * v_dim, kv_head + nope, size_t(v_dim) * sizeof(float));
    }
  }
  CausalAttentionParams params;
  params.q = q.data();
  params.k = k.data();
  params.v = v.data();
  params.out = attn;
  params.n_queries = input.n_tokens;
  params.n_keys = n_keys;
  params.n_heads = n_heads;
  params.head_dim_qk = qk_dim;
  params.head_dim_v = v_dim;
  params.softmax_scale = shape.softmax_scale;
  causal_attention(params);
}

// attn: [n_tokens, H * v_head_dim]. kv_b_proj rows of head h: [h*(nope+v), +nope) are W_UK,
// [h*(nope+v)+nope, +v) are W_UV; q_latent = W_UK^T q_nope, out = W_UV o_latent.
void attend_absorbed(const MlaShape& shape, const MlaWeights& weights, const MlaInput& input,
                     const std::vector<float>& q, float* attn) {
  const int64_t n_tokens = input.n_tokens, n_heads = shape.n_heads, rank = shape.kv_lora_rank;
  const int64_t nope = shape.qk_nope_head_dim, rope_dim = shape.qk_rope_head_dim;
  const int64_t v_dim = shape.v_head_dim, qk_dim = shape.qk_head_dim(), kv_dim = nope + v_dim;
  std::vector<float> q_latent(size_t(n_tokens * n_heads * rank), 0.0f);  // [T, H, kv_lora_rank]
  std::vector<float> q_pe(size_t(n_tokens * n_heads * rope_dim));         // [T, H, rope]
  std::vector<float> o_latent(size_t(n_tokens * n_heads * rank));         // [T, H, kv_lora_rank]
  thread_pool().parallel_for(n_tokens * n_heads, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item % n_heads;
      const float* q_head = q.data() + item * qk_dim;
      linear_transposed_rows(weights.kv_b_proj, head * kv_dim, head * kv_dim + nope, q_head,
                             q_latent.data() + item * rank);
      std::memcpy(q_pe.data() + item * rope_dim, q_head + nope, size_t(rope_dim) * sizeof(float));
    }
  });
  MlaAbsorbedParams params;
  params.q_latent = q_latent.data();
  params.q_pe = q_pe.data();
  params.out_latent = o_latent.data();
  params.cache = input.cache;
  params.layer = input.layer;
  params.n_queries = n_tokens;
  params.first_position = input.start_position;
  params.n_heads = n_heads;
  params.kv_lora_rank = rank;
  params.qk_rope_head_dim = rope_dim;
  params.softmax_scale = shape.softmax_scale;
  mla_absorbed_attention(params);
  thread_pool().parallel_for(n_tokens * n_heads, [&](int64_t begin, int64_t end, int) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item % n_heads;
      linear_rows(weights.kv_b_proj, head * kv_dim + nope, head * kv_dim + kv_dim,
                  o_latent.data() + item * rank, rank, 1, attn + item * v_dim, v_dim);
    }
  });
}

}  // namespace

void mla_forward(const MlaShape& shape, const MlaWeights& weights, const RotaryEmbedding& rope,
                 const MlaInput& input, MlaPath path, float* out) {
  const std::vector<float> q = project_queries(shape, weights, rope, input);
  write_latents(shape, weights, rope, input);
  if (path == MlaPath::Auto)
    path = input.n_tokens >= kExpandedMinTokens ? MlaPath::Expanded : MlaPath::Absorbed;
  std::vector<float> attn(size_t(input.n_tokens * shape.n_heads * shape.v_head_dim));
  if (path == MlaPath::Expanded)
    attend_expanded(shape, weights, input, q, attn.data());
  else
    attend_absorbed(shape, weights, input, q, attn.data());
  linear(weights.o_proj, attn.data(), input.n_tokens, out);
}

}  // namespace mlaserve
