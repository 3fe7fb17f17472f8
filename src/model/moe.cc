#include "model/moe.h"

#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/simd.h"

namespace mlaserve {

// One parallel pass computes each thread's rows of gate and up for every token and applies
// the activation to them; a second runs down_proj. (Separate passes for gate, up and a serial
// activation cost a dispatch more per MLP and left the other threads idle, then asleep.)
void mlp_forward(const MlpWeights& weights, const float* x, int64_t n_tokens, float* out) {
  const int64_t width = weights.gate_proj.rows, hidden = weights.gate_proj.cols;
  std::vector<float> gate(size_t(n_tokens * width)), up(size_t(n_tokens * width));
  const GluActivation& act = weights.activation;
  thread_pool().parallel_for(
      width,
      [&](int64_t begin, int64_t end, int) {
        linear_rows(weights.gate_proj, begin, end, x, hidden, n_tokens, gate.data() + begin, width);
        linear_rows(weights.up_proj, begin, end, x, hidden, n_tokens, up.data() + begin, width);
        for (int64_t t = 0; t < n_tokens; ++t) {
          float* g = gate.data() + t * width;
          const float* u = up.data() + t * width;
          for (int64_t i = begin; i < end; ++i) {
            g[i] = act.situ ? act.beta * std::tanh(g[i] / act.beta) / (1.0f + std::exp(-g[i])) *
                                  (act.linear_beta * std::tanh(u[i] / act.linear_beta))
                            : g[i] / (1.0f + std::exp(-g[i])) * u[i];
          }
        }
      },
      8);
  linear(weights.down_proj, gate.data(), n_tokens, out);
}

namespace {

// sum_k w_k expert_k(x) over the experts this rank owns, accumulated into out; x, out:
// [n_tokens, width] with width the experts' input width.
void run_routed_experts(const MoeWeights& weights, const std::vector<std::vector<std::pair<int64_t, float>>>& tokens_of,
                        const float* x, int64_t width, float* out) {
  // Each active expert runs once on all its tokens, so its weights are read once per step.
  std::vector<float> gathered, expert_out;
  for (int64_t e = 0; e < int64_t(tokens_of.size()); ++e) {
    const auto& assigned = tokens_of[size_t(e)];
    if (assigned.empty() || e < weights.first_owned_expert || e >= weights.end_owned_expert) continue;
    const int64_t count = int64_t(assigned.size());
    gathered.resize(size_t(count * width));
    expert_out.resize(size_t(count * width));
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(gathered.data() + i * width, x + assigned[size_t(i)].first * width, size_t(width) * sizeof(float));
    mlp_forward(weights.experts[size_t(e)], gathered.data(), count, expert_out.data());
    for (int64_t i = 0; i < count; ++i)
      simd::axpy(assigned[size_t(i)].second, expert_out.data() + i * width, out + assigned[size_t(i)].first * width, width);
  }
}

}  // namespace

void moe_forward(const RouterParams& router, const MoeWeights& weights, const float* x,
                 int64_t n_tokens, float* out, Communicator* comm) {
  const int64_t hidden = weights.gate.cols, top_k = router.top_k;
  std::vector<float> logits(size_t(n_tokens * router.n_experts));  // [n_tokens, n_experts]
  linear(weights.gate, x, n_tokens, logits.data());
  std::vector<int32_t> ids(size_t(n_tokens * top_k));
  std::vector<float> expert_weights(size_t(n_tokens * top_k));
  std::vector<std::vector<std::pair<int64_t, float>>> tokens_of(static_cast<size_t>(router.n_experts));
  for (int64_t t = 0; t < n_tokens; ++t) {
    route_token(logits.data() + t * router.n_experts, weights.e_score_correction_bias, router,
                ids.data() + t * top_k, expert_weights.data() + t * top_k);
    for (int64_t k = 0; k < top_k; ++k)
      tokens_of[ids[t * top_k + k]].emplace_back(t, expert_weights[t * top_k + k]);
  }
  if (weights.shared_experts)
    mlp_forward(*weights.shared_experts, x, n_tokens, out);
  else
    std::fill(out, out + n_tokens * hidden, 0.0f);
  if (!weights.latent) return run_routed_experts(weights, tokens_of, x, hidden, out);
  const LatentMoeWeights& latent = *weights.latent;
  const int64_t width = latent.routed_expert_down_proj.rows;
  std::vector<float> h(size_t(n_tokens * width)), routed(h.size(), 0.0f), back(size_t(n_tokens * hidden));
  linear(latent.routed_expert_down_proj, x, n_tokens, h.data());
  run_routed_experts(weights, tokens_of, h.data(), width, routed.data());
  if (comm) comm->all_reduce_sum(routed.data(), int64_t(routed.size()));
  if (comm && comm->rank() != 0) return;
  if (latent.routed_expert_norm)
    rms_norm(routed.data(), width, latent.routed_expert_norm, n_tokens, width, latent.norm_eps, routed.data(), width);
  linear(latent.routed_expert_up_proj, routed.data(), n_tokens, back.data());
  for (size_t i = 0; i < back.size(); ++i) out[i] += back[i];
}

MlpWeights load_mlp_weights(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t width) {
  return MlpWeights{loader.linear(prefix + ".gate_proj", width, hidden),
                    loader.linear(prefix + ".up_proj", width, hidden),
                    loader.linear(prefix + ".down_proj", hidden, width)};
}

}  // namespace mlaserve
