// Kimi Delta Attention's recurrence (flash-linear-attention naive_recurrent_kda, the gated
// delta rule with a per-channel decay), one head at a time. The state S is [K, V] in fp32:
// row i belongs to key channel i.
#pragma once
#include <cstdint>

namespace mlaserve {

// One token: S <- Diag(exp g) S;  S <- S + k (beta (v - S^T k))^T;  out = S^T q.
// q and k must already be L2-normalised (and q scaled by K^-1/2); g: [K] log decays.
void kda_recurrent_step(float* state, const float* q, const float* k, const float* v, const float* g,
                        float beta, int64_t key_dim, int64_t value_dim, float* out);

// x / sqrt(sum x^2 + 1e-6) * scale, in place (fla's l2norm, eps 1e-6).
void l2_normalize(float* x, int64_t n, float scale);

}  // namespace mlaserve
