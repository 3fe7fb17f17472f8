// Kimi Delta Attention layer (Kimi Linear's KimiDeltaAttention): q/k/v projections through
// a causal depthwise short convolution and SiLU, a per-channel forget gate
// g = -exp(A_log[h]) * softplus(f_b(f_a(x)) + dt_bias) (Kimi K3 with gate_lower_bound lb:
// g = lb * sigmoid(exp(A_log[h]) * (f_b(f_a(x)) + dt_bias))), beta = sigmoid(b_proj(x)), the
// gated delta-rule recurrence per head, then RMSNorm(o_norm) * sigmoid(gate) with gate =
// g_b(g_a(x)) (K3 use_full_rank_gate: g_proj(x)), and o_proj.
#pragma once
#include <optional>
#include <span>

#include "io/linear_weight.h"

namespace mlaserve {

struct KdaWeights {
  LinearWeight q_proj, k_proj, v_proj;  // [H * head_dim, hidden]
  const float* q_conv1d = nullptr;      // [H * head_dim, 1, kernel]; tap kernel-1 is the current token
  const float* k_conv1d = nullptr;
  const float* v_conv1d = nullptr;
  const float* A_log = nullptr;        // [H] (stored [1, 1, H, 1])
  LinearWeight f_a_proj;               // [head_dim, hidden]
  LinearWeight f_b_proj;               // [H * head_dim, head_dim]
  const float* dt_bias = nullptr;      // [H * head_dim]
  LinearWeight b_proj;                 // [H, hidden]
  LinearWeight g_a_proj;               // [head_dim, hidden] (no full-rank gate)
  LinearWeight g_b_proj;               // [H * head_dim, head_dim]
  std::optional<LinearWeight> g_proj;  // K3 full-rank output gate [H * head_dim, hidden]
  const float* o_norm = nullptr;       // [head_dim]
  LinearWeight o_proj;                 // [hidden, H * head_dim]
};

struct KdaShape {
  int64_t hidden_size, n_heads, head_dim, conv_kernel;
  double norm_eps;                        // o_norm: rms_norm_eps
  std::optional<float> gate_lower_bound;  // K3
  int64_t width() const { return n_heads * head_dim; }
  // Floats of one sequence's state for one layer: q, k, v conv windows, then S [H, K, V].
  int64_t state_floats() const { return 3 * width() * (conv_kernel - 1) + n_heads * head_dim * head_dim; }
};

// One sequence's slice of the batch and its state for this layer (zeroed by the caller for a
// sequence that starts at position 0).
struct KdaSequence {
  int64_t token_offset = 0;
  int64_t n_tokens = 0;
  float* state = nullptr;  // KdaShape::state_floats()
};

// x: [n_tokens, hidden] normed input of the whole batch; out: [n_tokens, hidden].
void kda_forward(const KdaShape& shape, const KdaWeights& weights, const float* x, int64_t n_tokens,
                 std::span<const KdaSequence> sequences, float* out);

}  // namespace mlaserve
