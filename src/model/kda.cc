#include "model/kda.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace mlaserve {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// Causal depthwise convolution then SiLU over one sequence's rows of `projected`
// ([n, channels] with row stride `stride`), in place; `window` holds the kernel-1 rows before
// them and is advanced to the last kernel-1 inputs.
void short_conv_silu(float* projected, int64_t stride, int64_t n, int64_t channels, const float* weight, int64_t kernel,
                     float* window) {
  const int64_t history = kernel - 1;
  thread_local std::vector<float> inputs;  // [history + n, channels], reused
  inputs.resize(size_t((history + n) * channels));
  std::memcpy(inputs.data(), window, size_t(history * channels) * sizeof(float));
  for (int64_t t = 0; t < n; ++t)
    std::memcpy(inputs.data() + (history + t) * channels, projected + t * stride, size_t(channels) * sizeof(float));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < channels; ++c) {
      float sum = 0.0f;
      for (int64_t tap = 0; tap < kernel; ++tap)
        sum += weight[c * kernel + tap] * inputs[size_t((t + tap) * channels + c)];
      projected[t * stride + c] = silu(sum);
    }
  std::memcpy(window, inputs.data() + n * channels, size_t(history * channels) * sizeof(float));
}

}  // namespace

void kda_forward(const KdaShape& shape, const KdaWeights& weights, const float* x, int64_t n_tokens,
                 std::span<const KdaSequence> sequences, float* out) {
  const int64_t width = shape.width(), heads = shape.n_heads, dim = shape.head_dim;
  const int64_t history = shape.conv_kernel - 1;
  // Reused from step to step (the decode path allocates nothing once they have grown), through
  // references: the pool's lambda below runs on other threads, where a thread_local named
  // directly would be that thread's own.
  thread_local std::vector<float> buffers[8];
  std::vector<float>& q = buffers[0];
  std::vector<float>& k = buffers[1];
  std::vector<float>& v = buffers[2];
  std::vector<float>& f = buffers[3];
  std::vector<float>& gate = buffers[4];
  std::vector<float>& low = buffers[5];
  std::vector<float>& beta = buffers[6];
  std::vector<float>& o = buffers[7];
  for (auto* buffer : {&q, &k, &v, &f, &gate, &o}) buffer->resize(size_t(n_tokens * width));
  low.resize(size_t(n_tokens * dim));
  beta.resize(size_t(n_tokens * heads));
  linear(weights.q_proj, x, n_tokens, q.data());
  linear(weights.k_proj, x, n_tokens, k.data());
  linear(weights.v_proj, x, n_tokens, v.data());
  linear(weights.f_a_proj, x, n_tokens, low.data());
  linear(weights.f_b_proj, low.data(), n_tokens, f.data());
  if (weights.g_proj) {
    linear(*weights.g_proj, x, n_tokens, gate.data());
  } else {
    linear(weights.g_a_proj, x, n_tokens, low.data());
    linear(weights.g_b_proj, low.data(), n_tokens, gate.data());
  }
  linear(weights.b_proj, x, n_tokens, beta.data());
  for (auto& b : beta) b = sigmoid(b);
  for (int64_t t = 0; t < n_tokens; ++t)  // log decay per channel
    for (int64_t c = 0; c < width; ++c) {
      float& value = f[size_t(t * width + c)];
      const float rate = std::exp(weights.A_log[c / dim]), pre = value + weights.dt_bias[c];
      value = shape.gate_lower_bound ? *shape.gate_lower_bound * sigmoid(rate * pre) : -rate * softplus(pre);
    }
  const float q_scale = 1.0f / std::sqrt(float(dim));
  for (const KdaSequence& seq : sequences) {
    const int64_t first = seq.token_offset;
    float* conv_windows = seq.state;
    short_conv_silu(q.data() + first * width, width, seq.n_tokens, width, weights.q_conv1d, shape.conv_kernel,
                    conv_windows);
    short_conv_silu(k.data() + first * width, width, seq.n_tokens, width, weights.k_conv1d, shape.conv_kernel,
                    conv_windows + history * width);
    short_conv_silu(v.data() + first * width, width, seq.n_tokens, width, weights.v_conv1d, shape.conv_kernel,
                    conv_windows + 2 * history * width);
    float* recurrent = seq.state + 3 * history * width;  // [H, K, V]
    const int64_t chunk = kda_chunk_tokens(seq.n_tokens, kernel_config());
    const bool chunked = chunk > 0;
    // Heads are independent: each worker runs whole heads through every token in order.
    thread_pool().parallel_for(heads, [&](int64_t begin, int64_t end, int) {
      for (int64_t h = begin; h < end; ++h) {
        for (int64_t t = first; t < first + seq.n_tokens; ++t) {
          l2_normalize(q.data() + t * width + h * dim, dim, q_scale);
          l2_normalize(k.data() + t * width + h * dim, dim, 1.0f);
        }
        const size_t at = size_t(first * width + h * dim);
        if (chunked) {
          kda_chunked(recurrent + h * dim * dim, q.data() + at, k.data() + at, v.data() + at, f.data() + at,
                      beta.data() + first * heads + h, seq.n_tokens, width, heads, dim, chunk, o.data() + at);
          continue;
        }
        for (int64_t t = 0; t < seq.n_tokens; ++t)
          kda_recurrent_step(recurrent + h * dim * dim, q.data() + at + t * width, k.data() + at + t * width,
                             v.data() + at + t * width, f.data() + at + t * width,
                             beta[size_t((first + t) * heads + h)], dim, dim, o.data() + at + t * width);
      }
    });
  }
  // o_norm: per-head RMSNorm times sigmoid of the output gate (FusedRMSNormGated).
  rms_norm(o.data(), dim, weights.o_norm, n_tokens * heads, dim, shape.norm_eps, o.data(), dim);
  for (size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
  linear(weights.o_proj, o.data(), n_tokens, out);
}

}  // namespace mlaserve
