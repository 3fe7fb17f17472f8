// What the planner needs to know about a model, computed from its config.json as the engine
// parses it (parse_model_config; never typed in): parameters by kind, parameters active per token, cache bytes per
// token (MLA latent) and fixed state bytes per sequence (KDA recurrent and conv state).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "io/model_config.h"

namespace mlaserve {

struct ParamCounts {
  int64_t embedding = 0;  // token embedding table (a lookup: never "active" compute)
  int64_t lm_head = 0;
  int64_t attention = 0;       // MLA and KDA projections, convs, gates, their norms
  int64_t dense_mlp = 0;       // the first_k_dense_replace layers' MLPs
  int64_t routed_experts = 0;  // all routed experts of all MoE layers
  int64_t shared_experts = 0;
  int64_t moe_other = 0;  // routers, score biases, latent-MoE down/up projections and norm
  int64_t norms = 0;      // layer norms, final norm, attention-residual weights
  int64_t total() const;
};

struct ModelSpec {
  std::string name, family;  // family: deepseek_v3 | kimi_linear
  int64_t hidden_size = 0, num_layers = 0, num_attention_heads = 0;
  int64_t mla_layers = 0, kda_layers = 0, moe_layers = 0;
  int64_t qk_head_dim = 0, v_head_dim = 0;  // per MLA head: nope + rope, and value
  int64_t kda_heads = 0, kda_head_dim = 0, kda_conv_kernel = 0;
  int64_t n_routed_experts = 0, experts_per_token = 0, params_per_expert = 0;
  std::string native_weights;  // bf16 | fp8 | int4:G | mxfp4, from quantization_config
  ParamCounts params;
  int64_t active_params = 0;  // per token, embedding lookup excluded

  ModelConfig config;  // as the engine reads it (parse_model_config)

  // MLA latent cache: layers x (kv_lora_rank + qk_rope_head_dim) x bytes_per_value.
  int64_t kv_bytes_per_token(int64_t bytes_per_value = 2) const {
    return config.cache_layers() * config.kv_latent_dim() * bytes_per_value;
  }
  // KDA: fp32 recurrent state [heads, d, d] + fp32 conv windows of the last kernel-1 q/k/v inputs.
  int64_t recurrent_state_bytes_per_sequence() const;
  int64_t conv_state_bytes_per_sequence() const;
  // Distinct routed experts `tokens` tokens route to in one MoE layer, E (1 - (1 - k/E)^T),
  // for routing spread evenly: each is read once a step.
  double experts_touched(double tokens) const;
};

// Throws Error naming the key for a config it cannot read. Accepts deepseek_v3, kimi_k2,
// kimi_linear and kimi_k3 (its text_config).
ModelSpec model_spec_from_config(const nlohmann::json& config, const std::string& name);
// Built-in published configs: deepseek-v3, kimi-k2, kimi-k3. Throws on an unknown name.
nlohmann::json known_model_config(const std::string& name);
// A preset name or a path to a config.json (or a model directory holding one).
ModelSpec load_model_spec(const std::string& name_or_path);

}  // namespace mlaserve
