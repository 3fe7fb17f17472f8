// Kimi Delta Attention's recurrence (flash-linear-attention naive_recurrent_kda, the gated
// delta rule with a per-channel decay), one head at a time. The state S is [K, V] in fp32:
// row i belongs to key channel i.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"

namespace MLASERVE_KERNELS_NS {

// One token: S <- Diag(exp g) S;  S <- S + k (beta (v - S^T k))^T;  out = S^T q.
// q and k must already be L2-normalised (and q scaled by K^-1/2); g: [K] log decays.
void kda_recurrent_step(float* state, const float* q, const float* k, const float* v, const float* g, float beta,
                        int64_t key_dim, int64_t value_dim, float* out);

// The same recurrence over n tokens of one head in the chunked (WY) form of flash-linear-
// attention's chunk_kda: per chunk of c tokens, with G the cumulative log decay inside it,
//   u_t = beta_t (v_t - S0^T (exp(G_t) * k_t)) - sum_{s<t} A_ts u_s,  A_ts = beta_t sum_i k_t,i k_s,i exp(G_t,i -
//   G_s,i) o_t = S0^T (exp(G_t) * q_t) + sum_{s<=t} M_ts u_s,             M_ts = sum_i q_t,i k_s,i exp(G_t,i - G_s,i)
//   S  <- exp(G_last) * S0 + sum_s (exp(G_last - G_s) * k_s) u_s^T.
// exp(G_t - G_s) is built as the product of the steps' decays exp(g) (each at most 1), so
// nothing can overflow, however strong the decay. Token t's q, k, v, g, out are at t * stride, beta at t * beta_stride.
void kda_chunked(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n_tokens, int64_t stride, int64_t beta_stride, int64_t dim, int64_t chunk, float* out);

// x / sqrt(sum x^2 + 1e-6) * scale, in place (fla's l2norm, eps 1e-6).
void l2_normalize(float* x, int64_t n, float scale);

}  // namespace MLASERVE_KERNELS_NS
