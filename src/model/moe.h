// Gated MLP and routed Mixture-of-Experts (DeepSeek-V3 DeepseekV3MLP / DeepseekV3MoE).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/linear_weight.h"
#include "kernels/moe_router.h"
#include "parallel/communicator.h"

namespace mlaserve {

// The gated activation of an MLP: act(gate x) * up'(up x). SiLU with up' = identity
// (DeepSeek-V3, Kimi Linear), or Kimi K3's SiTU (hidden_act "situ"), in fp32:
// act(g) = beta tanh(g / beta) sigmoid(g), up'(u) = linear_beta tanh(u / linear_beta)
// (activation_situ_beta, activation_situ_linear_beta).
struct GluActivation {
  bool situ = false;
  float beta = 4.0f, linear_beta = 25.0f;
};

struct MlpWeights {
  LinearWeight gate_proj;  // [intermediate, hidden]
  LinearWeight up_proj;    // [intermediate, hidden]
  LinearWeight down_proj;  // [hidden, intermediate]
  GluActivation activation = {};
  size_t bytes() const { return gate_proj.bytes() + up_proj.bytes() + down_proj.bytes(); }
};

inline void visit_mlp(const MlpWeights& mlp, const std::function<void(const LinearWeight&)>& visit) {
  visit(mlp.gate_proj);
  visit(mlp.up_proj);
  visit(mlp.down_proj);
}

// Kimi K3's LatentMoE: the routed experts run in a narrower space. h = down(x); the weighted
// sum of the experts on h is RMSNorm'd (routed_expert_norm, when latent_moe_use_norm), then up()
// back to hidden. The router and the shared experts read x itself.
struct LatentMoeWeights {
  LinearWeight routed_expert_down_proj;       // [latent, hidden]
  const float* routed_expert_norm = nullptr;  // [latent] or null
  LinearWeight routed_expert_up_proj;         // [hidden, latent]
  double norm_eps = 1e-6;
};

struct MoeWeights {
  LinearWeight gate;                               // router [n_routed_experts, hidden]
  const float* e_score_correction_bias = nullptr;  // [n_routed_experts], noaux_tc only
  std::vector<MlpWeights> experts;                 // n_routed_experts
  std::optional<MlpWeights> shared_experts;        // intermediate = n_shared * moe_intermediate
  int64_t first_owned_expert = 0;                  // expert parallelism: this rank runs experts
  int64_t end_owned_expert = INT64_MAX;            // [first_owned_expert, end_owned_expert)
  std::optional<LatentMoeWeights> latent;          // Kimi K3
};

// prefix.{gate,up,down}_proj of an MLP of `width` (checked against the checkpoint).
MlpWeights load_mlp_weights(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t width);

// out = down(silu(gate x) * up x); x, out: [n_tokens, hidden].
void mlp_forward(const MlpWeights& weights, const float* x, int64_t n_tokens, float* out);

// The router's parameters from config.json (n_routed_experts, n_group, topk_group,
// num_experts_per_tok, scoring_func, topk_method, norm_topk_prob, routed_scaling_factor).
RouterParams router_params(const ModelConfig& config);

// out = sum_k w_k expert_k(x) + shared(x), experts chosen per token by the router. Sharded,
// out is this rank's partial sum; with LatentMoE the routed latent sum is all-reduced on
// `comm` before its norm, and only rank 0 adds the (then identical) up-projection.
void moe_forward(const RouterParams& router, const MoeWeights& weights, const float* x, int64_t n_tokens, float* out,
                 Communicator* comm = nullptr);

// The bytes of routed-expert weights moe_forward has read in this process since it started:
// each call adds the bytes of the experts its tokens chose, each expert once however many of
// its tokens chose it (ranks run as threads each add their shard's). bench-model measures a
// batch step's distinct experts by the growth over its steps.
int64_t routed_expert_bytes_read();

}  // namespace mlaserve
