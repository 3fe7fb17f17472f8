// Gated MLP and routed Mixture-of-Experts (DeepSeek-V3 DeepseekV3MLP / DeepseekV3MoE).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/linear_weight.h"
#include "kernels/moe_router.h"

namespace mlaserve {

struct MlpWeights {
  LinearWeight gate_proj;  // [intermediate, hidden]
  LinearWeight up_proj;    // [intermediate, hidden]
  LinearWeight down_proj;  // [hidden, intermediate]
};

struct MoeWeights {
  LinearWeight gate;                              // router [n_routed_experts, hidden]
  const float* e_score_correction_bias = nullptr;  // [n_routed_experts], noaux_tc only
  std::vector<MlpWeights> experts;                // n_routed_experts
  std::optional<MlpWeights> shared_experts;       // intermediate = n_shared * moe_intermediate
  int64_t first_owned_expert = 0;                 // expert parallelism: this rank runs experts
  int64_t end_owned_expert = INT64_MAX;           // [first_owned_expert, end_owned_expert)
};

// prefix.{gate,up,down}_proj of an MLP of `width` (checked against the checkpoint).
MlpWeights load_mlp_weights(WeightLoader& loader, const std::string& prefix, int64_t hidden, int64_t width);

// out = down(silu(gate x) * up x); x, out: [n_tokens, hidden].
void mlp_forward(const MlpWeights& weights, const float* x, int64_t n_tokens, float* out);

// out = sum_k w_k expert_k(x) + shared(x), experts chosen per token by the router.
void moe_forward(const RouterParams& router, const MoeWeights& weights, const float* x,
                 int64_t n_tokens, float* out);

}  // namespace mlaserve
