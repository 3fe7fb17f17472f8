#include "tools/plan/model_spec.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

int64_t get(const json& config, const char* key, std::optional<int64_t> fallback = {}) {
  if (config.contains(key) && config[key].is_number_integer()) return config[key].get<int64_t>();
  MLA_CHECK(fallback.has_value(), "config: '{}' is missing or not an integer", key);
  return *fallback;
}

std::string native_weights(const json& config) {
  if (!config.contains("quantization_config") || config["quantization_config"].is_null()) return "bf16";
  const json& quant = config["quantization_config"];
  const std::string method = quant.value("quant_method", "");
  if (method == "fp8") return "fp8";
  if (quant.value("format", "") == "mxfp4-pack-quantized") return "mxfp4";
  if (quant.value("format", "") == "int-quantized") return "int8";
  if (method == "compressed-tensors") {
    const json groups = quant.value("config_groups", json::object());  // a copy: iterate a live object
    for (const auto& [name, group] : groups.items()) {
      const json& weights = group.value("weights", json::object());
      if (weights.value("type", "int") == "float") return "mxfp4";
      return "int4:" + std::to_string(weights.value("group_size", 32));
    }
  }
  return "bf16";
}

// DeepSeek-V3 / Kimi K2: every layer MLA; MoE after first_k_dense_replace.
void count_deepseek_v3(const json& c, ModelSpec& spec) {
  const int64_t hidden = spec.hidden_size, heads = spec.num_attention_heads;
  const int64_t nope = get(c, "qk_nope_head_dim"), rope = get(c, "qk_rope_head_dim"), v = get(c, "v_head_dim");
  const int64_t kv_rank = get(c, "kv_lora_rank");
  const bool q_lora = c.contains("q_lora_rank") && !c["q_lora_rank"].is_null();
  int64_t attention = (kv_rank + rope) * hidden + kv_rank + heads * (nope + v) * kv_rank + hidden * heads * v;
  if (q_lora) {
    const int64_t q_rank = get(c, "q_lora_rank");
    attention += q_rank * hidden + q_rank + heads * (nope + rope) * q_rank;
  } else {
    attention += heads * (nope + rope) * hidden;
  }
  const int64_t dense_layers = std::min(get(c, "first_k_dense_replace", 0), spec.num_layers);
  spec.mla_layers = spec.num_layers;
  spec.moe_layers = spec.num_layers - dense_layers;
  spec.kv_lora_rank = kv_rank;
  spec.qk_rope_head_dim = rope;
  spec.qk_head_dim = nope + rope;
  spec.v_head_dim = v;
  spec.n_routed_experts = get(c, "n_routed_experts", 0);
  spec.experts_per_token = get(c, "num_experts_per_tok", 0);
  const int64_t moe_width = get(c, "moe_intermediate_size", 0);
  spec.params_per_expert = 3 * hidden * moe_width;
  ParamCounts& p = spec.params;
  p.attention = attention * spec.num_layers;
  p.dense_mlp = dense_layers * 3 * hidden * get(c, "intermediate_size", 0);
  p.routed_experts = spec.moe_layers * spec.n_routed_experts * spec.params_per_expert;
  p.shared_experts = spec.moe_layers * 3 * hidden * get(c, "n_shared_experts", 0) * moe_width;
  p.moe_other = spec.moe_layers * spec.n_routed_experts * (hidden + 1);  // router and score bias
  p.norms = spec.num_layers * 2 * hidden + hidden;
}

// Kimi Linear / Kimi K3: MLA on linear_attn_config.full_attn_layers (1-based), KDA elsewhere;
// K3 adds full-rank gates, an MLA output gate, LatentMoE and attention residuals.
void count_kimi_linear(const json& c, ModelSpec& spec) {
  const int64_t hidden = spec.hidden_size, heads = spec.num_attention_heads;
  const json& linear = c.at("linear_attn_config");
  const int64_t full_attn = int64_t(linear.at("full_attn_layers").size());
  spec.mla_layers = full_attn;
  spec.kda_layers = spec.num_layers - full_attn;
  spec.kda_heads = get(linear, "num_heads");
  spec.kda_head_dim = get(linear, "head_dim");
  spec.kda_conv_kernel = get(linear, "short_conv_kernel_size", 4);
  const int64_t kda_width = spec.kda_heads * spec.kda_head_dim, d = spec.kda_head_dim;
  const bool full_rank_gate = linear.value("use_full_rank_gate", false);
  int64_t kda = 3 * kda_width * hidden + 3 * kda_width * spec.kda_conv_kernel + d * hidden + kda_width * d +
                spec.kda_heads * hidden + hidden * kda_width + kda_width + d + std::max<int64_t>(spec.kda_heads, 128);
  kda += full_rank_gate ? kda_width * hidden : d * hidden + kda_width * d;  // g_proj, or g_a/g_b
  const int64_t nope = get(c, "qk_nope_head_dim"), rope = get(c, "qk_rope_head_dim"), v = get(c, "v_head_dim");
  const int64_t kv_rank = get(c, "kv_lora_rank");
  int64_t mla = (kv_rank + rope) * hidden + kv_rank + heads * (nope + v) * kv_rank + hidden * heads * v;
  const bool q_lora = c.contains("q_lora_rank") && !c["q_lora_rank"].is_null();
  mla += q_lora ? get(c, "q_lora_rank") * (hidden + 1) + heads * (nope + rope) * get(c, "q_lora_rank")
                : heads * (nope + rope) * hidden;
  if (c.value("mla_use_output_gate", false)) mla += heads * v * hidden;
  spec.kv_lora_rank = kv_rank;
  spec.qk_rope_head_dim = rope;
  spec.qk_head_dim = nope + rope;
  spec.v_head_dim = v;
  const int64_t dense_layers = std::min(get(c, "first_k_dense_replace", 0), spec.num_layers);
  spec.moe_layers = spec.num_layers - dense_layers;
  spec.n_routed_experts = get(c, "num_experts", 0);
  spec.experts_per_token = get(c, "num_experts_per_token", 0);
  const int64_t moe_width = get(c, "moe_intermediate_size", 0);
  const int64_t latent = get(c, "routed_expert_hidden_size", hidden);  // LatentMoE width
  spec.params_per_expert = 3 * latent * moe_width;
  ParamCounts& p = spec.params;
  p.attention = kda * spec.kda_layers + mla * spec.mla_layers;
  p.dense_mlp = dense_layers * 3 * hidden * get(c, "intermediate_size", 0);
  p.routed_experts = spec.moe_layers * spec.n_routed_experts * spec.params_per_expert;
  p.shared_experts = spec.moe_layers * 3 * hidden * get(c, "num_shared_experts", 0) * moe_width;
  const int64_t latent_proj = latent != hidden ? 2 * hidden * latent + latent : 0;
  p.moe_other = spec.moe_layers * (spec.n_routed_experts * (hidden + 1) + latent_proj);
  const bool attn_res = c.contains("attn_res_block_size") && !c["attn_res_block_size"].is_null();
  p.norms = spec.num_layers * 2 * hidden + hidden + (attn_res ? spec.num_layers * 4 * hidden + 2 * hidden : 0);
}

}  // namespace

int64_t ParamCounts::total() const {
  return embedding + lm_head + attention + dense_mlp + routed_experts + shared_experts + moe_other + norms;
}

int64_t ModelSpec::kv_bytes_per_token(int64_t bytes_per_value) const {
  return mla_layers * (kv_lora_rank + qk_rope_head_dim) * bytes_per_value;
}

int64_t ModelSpec::recurrent_state_bytes_per_sequence() const {
  return kda_layers * kda_heads * kda_head_dim * kda_head_dim * 4;
}

int64_t ModelSpec::conv_state_bytes_per_sequence() const {
  return kda_layers * 3 * (kda_conv_kernel - 1) * kda_heads * kda_head_dim * 4;  // fp32, as the engine keeps it
}

ModelSpec model_spec_from_config(const json& raw, const std::string& name) {
  const json& c = raw.contains("text_config") ? raw["text_config"] : raw;
  ModelSpec spec;
  spec.name = name;
  const std::string type = c.value("model_type", raw.value("model_type", ""));
  spec.hidden_size = get(c, "hidden_size");
  spec.num_layers = get(c, "num_hidden_layers");
  spec.num_attention_heads = get(c, "num_attention_heads");
  if (type == "deepseek_v3" || type == "kimi_k2") {
    spec.family = "deepseek_v3";
    count_deepseek_v3(c, spec);
  } else if (type == "kimi_linear" || type == "kimi_k3") {
    spec.family = "kimi_linear";
    count_kimi_linear(c, spec);
  } else {
    fail("config: model_type '{}' is not supported by the planner (deepseek_v3, kimi_k2, kimi_linear, kimi_k3)", type);
  }
  const int64_t vocab = get(c, "vocab_size");
  spec.params.embedding = vocab * spec.hidden_size;
  spec.params.lm_head = c.value("tie_word_embeddings", raw.value("tie_word_embeddings", false)) ? 0 : vocab * spec.hidden_size;
  const ParamCounts& p = spec.params;
  const int64_t routed_active = spec.moe_layers * spec.experts_per_token * spec.params_per_expert;
  spec.active_params = p.attention + p.dense_mlp + routed_active + p.shared_experts + p.moe_other + p.norms +
                       (p.lm_head > 0 ? p.lm_head : p.embedding);
  spec.native_weights = native_weights(c.contains("quantization_config") ? c : raw);
  return spec;
}

ModelSpec load_model_spec(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  if (!fs::exists(name_or_path)) return model_spec_from_config(known_model_config(name_or_path), name_or_path);
  const fs::path path = fs::is_directory(name_or_path) ? fs::path(name_or_path) / "config.json" : fs::path(name_or_path);
  try {
    return model_spec_from_config(json::parse(read_text_file(path.string())), path.parent_path().filename().string());
  } catch (const json::exception& e) {
    fail("'{}': not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace mlaserve
