#include "tools/plan/model_spec.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "io/gguf_model.h"
#include "io/model_config.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

std::string native_weights(const ModelConfig& config) {
  switch (config.quant) {
    case WeightQuant::None: return "bf16";
    case WeightQuant::Fp8Block: return "fp8";
    case WeightQuant::Int8: return "int8";
    case WeightQuant::Mxfp4: return "mxfp4";
    case WeightQuant::Int4Group: return "int4:" + std::to_string(config.int4_group_size);
  }
  return "bf16";
}

// One MLA layer's projections and norms: q (through q_lora_rank or direct), kv_a with its
// norm, kv_b, o_proj, and K3's output gate.
int64_t mla_params(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size, heads = c.num_attention_heads, rope = c.qk_rope_head_dim;
  int64_t mla = (c.kv_lora_rank + rope) * hidden + c.kv_lora_rank +
                heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank + hidden * heads * c.v_head_dim;
  mla += c.q_lora_rank ? *c.q_lora_rank * (hidden + 1) + heads * c.qk_head_dim() * *c.q_lora_rank
                       : heads * c.qk_head_dim() * hidden;
  if (c.mla_use_output_gate) mla += heads * c.v_head_dim * hidden;
  return mla;
}

// One KDA layer (Kimi Linear / K3): q/k/v projections and short convs, the decay and beta
// projections, A_log (stored with at least 128 entries) and dt bias, the output gate (full rank
// in K3, else g_a/g_b), o_norm and o_proj.
int64_t kda_params(const ModelConfig& c) {
  const KdaConfig& k = *c.kda;
  const int64_t hidden = c.hidden_size, width = k.num_heads * k.head_dim, d = k.head_dim;
  int64_t kda = 3 * width * hidden + 3 * width * k.short_conv_kernel_size + d * hidden + width * d +
                k.num_heads * hidden + hidden * width + width + d + std::max<int64_t>(k.num_heads, 128);
  return kda + (k.use_full_rank_gate ? width * hidden : d * hidden + width * d);
}

// Parameters by kind, from the config the engine loads (DeepSeek-V3 / Kimi K2: MLA in every
// layer; Kimi Linear / K3: MLA on full_attn_layers, KDA elsewhere, LatentMoE, attention
// residuals).
void count_params(const ModelConfig& c, ModelSpec& spec) {
  const int64_t hidden = c.hidden_size, layers = c.num_hidden_layers;
  const int64_t dense_layers = std::min(c.first_k_dense_replace, layers);
  spec.mla_layers = c.cache_layers();
  spec.kda_layers = layers - spec.mla_layers;
  spec.moe_layers = layers - dense_layers;
  spec.qk_head_dim = c.qk_head_dim();
  spec.v_head_dim = c.v_head_dim;
  if (c.kda) {
    spec.kda_heads = c.kda->num_heads;
    spec.kda_head_dim = c.kda->head_dim;
    spec.kda_conv_kernel = c.kda->short_conv_kernel_size;
  }
  spec.n_routed_experts = c.n_routed_experts;
  spec.experts_per_token = c.num_experts_per_tok;
  const int64_t latent = c.routed_expert_hidden_size.value_or(hidden);  // LatentMoE width
  spec.params_per_expert = 3 * latent * c.moe_intermediate_size;
  ParamCounts& p = spec.params;
  p.attention = mla_params(c) * spec.mla_layers + (c.kda ? kda_params(c) * spec.kda_layers : 0);
  p.dense_mlp = dense_layers * 3 * hidden * c.intermediate_size;
  p.routed_experts = spec.moe_layers * spec.n_routed_experts * spec.params_per_expert;
  p.shared_experts = spec.moe_layers * 3 * hidden * c.n_shared_experts * c.moe_intermediate_size;
  const int64_t latent_proj = latent != hidden ? 2 * hidden * latent + latent : 0;
  p.moe_other = spec.moe_layers * (spec.n_routed_experts * (hidden + 1) + latent_proj);  // routers, biases
  p.norms = layers * 2 * hidden + hidden + (c.attn_res_block_size ? layers * 4 * hidden + 2 * hidden : 0);
}

}  // namespace

int64_t ParamCounts::total() const {
  return embedding + lm_head + attention + dense_mlp + routed_experts + shared_experts + moe_other + norms;
}

int64_t ModelSpec::recurrent_state_bytes_per_sequence() const {
  return kda_layers * kda_heads * kda_head_dim * kda_head_dim * 4;
}

int64_t ModelSpec::conv_state_bytes_per_sequence() const {
  return kda_layers * 3 * (kda_conv_kernel - 1) * kda_heads * kda_head_dim * 4;  // fp32, as the engine keeps it
}

double ModelSpec::experts_touched(double tokens) const {
  const double experts = double(n_routed_experts), k = double(experts_per_token);
  return experts > 0 ? experts * (1.0 - std::pow(1.0 - k / experts, tokens)) : 0.0;
}

ModelSpec model_spec_from_config(const json& raw, const std::string& name) {
  ModelSpec spec;
  spec.config = parse_model_config(raw);
  const ModelConfig& config = spec.config;
  spec.name = name;
  spec.family = config.is_kimi_linear() ? "kimi_linear" : "deepseek_v3";
  spec.hidden_size = config.hidden_size;
  spec.num_layers = config.num_hidden_layers;
  spec.num_attention_heads = config.num_attention_heads;
  count_params(config, spec);
  spec.params.embedding = config.vocab_size * spec.hidden_size;
  spec.params.lm_head = config.tie_word_embeddings ? 0 : config.vocab_size * spec.hidden_size;
  const ParamCounts& p = spec.params;
  const int64_t routed_active = spec.moe_layers * spec.experts_per_token * spec.params_per_expert;
  spec.active_params = p.attention + p.dense_mlp + routed_active + p.shared_experts + p.moe_other + p.norms +
                       (p.lm_head > 0 ? p.lm_head : p.embedding);
  spec.native_weights = native_weights(config);
  return spec;
}

ModelSpec load_model_spec(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  if (!fs::exists(name_or_path)) return model_spec_from_config(known_model_config(name_or_path), name_or_path);
  if (is_gguf_path(name_or_path))  // a GGUF's keys, as config.json would have them
    return model_spec_from_config(gguf_config_json(open_gguf(name_or_path)), fs::path(name_or_path).stem().string());
  const fs::path path =
      fs::is_directory(name_or_path) ? fs::path(name_or_path) / "config.json" : fs::path(name_or_path);
  try {
    return model_spec_from_config(json::parse(read_text_file(path.string())), path.parent_path().filename().string());
  } catch (const json::exception& e) {
    fail("'{}': not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace mlaserve
