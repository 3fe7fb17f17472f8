#include "kernels/kda.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

void kda_recurrent_step(float* state, const float* q, const float* k, const float* v, const float* g, float beta,
                        int64_t key_dim, int64_t value_dim, float* out) {
  thread_local std::vector<float> delta;
  delta.assign(v, v + value_dim);  // v - S^T k after the decay
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    const float decay = std::exp(g[i]);
    for (int64_t j = 0; j < value_dim; ++j) row[j] *= decay;
    simd::axpy(-k[i], row, delta.data(), value_dim);
  }
  for (int64_t j = 0; j < value_dim; ++j) delta[size_t(j)] *= beta;
  for (int64_t j = 0; j < value_dim; ++j) out[j] = 0.0f;
  for (int64_t i = 0; i < key_dim; ++i) {
    float* row = state + i * value_dim;
    simd::axpy(k[i], delta.data(), row, value_dim);
    simd::axpy(q[i], row, out, value_dim);
  }
}

namespace {

// One chunk of c tokens (c <= 64) of one head; see kda_chunked.
void kda_chunk(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta,
               int64_t c, int64_t stride, int64_t beta_stride, int64_t dim, float* out) {
  thread_local std::vector<float> cumulative, decayed_k, decayed_q, u, last_k, a, m, spare;
  thread_local std::vector<const float*> rows, us;
  cumulative.resize(size_t(c * dim));  // G_t
  decayed_k.resize(size_t(c * dim));   // exp(G_t) * k_t, then beta_t (v_t - S0^T that) lands in u
  decayed_q.resize(size_t(c * dim));   // exp(G_t) * q_t
  u.assign(size_t(c * dim), 0.0f);
  last_k.resize(size_t(dim * c));  // [i][s]: exp(G_last,i - G_s,i) k_s,i
  a.assign(size_t(c * c), 0.0f);
  m.assign(size_t(c * c), 0.0f);
  for (int64_t t = 0; t < c; ++t)
    for (int64_t i = 0; i < dim; ++i)
      cumulative[size_t(t * dim + i)] = g[t * stride + i] + (t > 0 ? cumulative[size_t((t - 1) * dim + i)] : 0.0f);
  thread_local std::vector<float> step_decay, running;
  step_decay.resize(size_t(c * dim));  // exp(g_t)
  running.resize(size_t(dim));
  for (int64_t t = 0; t < c; ++t)
    for (int64_t i = 0; i < dim; ++i) {
      const float decay = std::exp(cumulative[size_t(t * dim + i)]);
      step_decay[size_t(t * dim + i)] = std::exp(g[t * stride + i]);
      decayed_k[size_t(t * dim + i)] = decay * k[t * stride + i];
      decayed_q[size_t(t * dim + i)] = decay * q[t * stride + i];
    }
  // A_ts and M_ts: exp(G_t - G_s) * k_s built up along t as a product of the steps' decays
  // (each at most 1), so no exponential of a difference is ever taken.
  for (int64_t s = 0; s < c; ++s) {
    std::copy_n(k + s * stride, dim, running.data());
    for (int64_t t = s; t < c; ++t) {
      if (t > s)
        for (int64_t i = 0; i < dim; ++i) running[size_t(i)] *= step_decay[size_t(t * dim + i)];
      if (t > s) a[size_t(t * c + s)] = beta[t * beta_stride] * simd::dot_f32(k + t * stride, running.data(), dim);
      m[size_t(t * c + s)] = simd::dot_f32(q + t * stride, running.data(), dim);
    }
    for (int64_t i = 0; i < dim; ++i) last_k[size_t(i * c + s)] = running[size_t(i)];
  }
  // S0^T (exp(G_t) k_t) into u and S0^T (exp(G_t) q_t) into out, 4 tokens per pass over S0.
  rows.resize(size_t(dim));
  for (int64_t i = 0; i < dim; ++i) rows[size_t(i)] = state + i * dim;
  spare.assign(size_t(2 * dim), 0.0f);  // where the odd token's results go when c is odd
  for (int64_t t = 0; t < c; ++t) std::fill(out + t * stride, out + t * stride + dim, 0.0f);
  for (int64_t t0 = 0; t0 < c; t0 += 2) {
    const int64_t t1 = std::min(t0 + 1, c - 1);
    const float* alpha[4] = {&decayed_k[size_t(t0 * dim)], &decayed_k[size_t(t1 * dim)], &decayed_q[size_t(t0 * dim)],
                             &decayed_q[size_t(t1 * dim)]};
    float* y[4] = {&u[size_t(t0 * dim)], t1 != t0 ? &u[size_t(t1 * dim)] : spare.data(), out + t0 * stride,
                   t1 != t0 ? out + t1 * stride : spare.data() + dim};
    simd::weighted_rows_4(alpha, rows.data(), dim, y, dim);
  }
  // u_t = beta_t (v_t - S0^T(...)) - sum_{s<t} A_ts u_s (forward substitution); o_t += sum M_ts u_s.
  for (int64_t t = 0; t < c; ++t) {
    float* u_t = &u[size_t(t * dim)];
    for (int64_t j = 0; j < dim; ++j) u_t[j] = beta[t * beta_stride] * (v[t * stride + j] - u_t[j]);
    for (int64_t s = 0; s < t; ++s) simd::axpy(-a[size_t(t * c + s)], &u[size_t(s * dim)], u_t, dim);
    for (int64_t s = 0; s <= t; ++s) simd::axpy(m[size_t(t * c + s)], &u[size_t(s * dim)], out + t * stride, dim);
  }
  // S <- exp(G_last) * S0 + sum_s (exp(G_last - G_s) k_s) u_s^T, row by row.
  const float* g_last = &cumulative[size_t((c - 1) * dim)];
  us.resize(size_t(c));
  for (int64_t s = 0; s < c; ++s) us[size_t(s)] = &u[size_t(s * dim)];
  for (int64_t i = 0; i < dim; ++i) {
    const float decay = std::exp(g_last[i]);
    for (int64_t j = 0; j < dim; ++j) state[i * dim + j] *= decay;
  }
  for (int64_t i = 0; i < dim; i += 4) {
    const float* alpha[4];
    float* y[4];
    for (int r = 0; r < 4; ++r) {
      const int64_t row = std::min(i + r, dim - 1);
      alpha[r] = &last_k[size_t(row * c)];
      y[r] = state + row * dim;
    }
    simd::weighted_rows_4(alpha, us.data(), c, y, dim);
  }
}

}  // namespace

void kda_chunked(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n_tokens, int64_t stride, int64_t beta_stride, int64_t dim, int64_t chunk, float* out) {
  MLA_CHECK(dim % 4 == 0 && chunk >= 1, "KDA chunked form: head_dim {} must be a multiple of 4", dim);
  for (int64_t t = 0; t < n_tokens; t += chunk) {
    const int64_t c = std::min(chunk, n_tokens - t);
    kda_chunk(state, q + t * stride, k + t * stride, v + t * stride, g + t * stride, beta + t * beta_stride, c, stride,
              beta_stride, dim, out + t * stride);
  }
}

void l2_normalize(float* x, int64_t n, float scale) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i]) * x[i];
  const float factor = scale / float(std::sqrt(sum + 1e-6));
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

}  // namespace MLASERVE_KERNELS_NS
