#include "tools/model_presets.h"

#include <fmt/format.h>

#include <vector>

#include "base/error.h"

namespace mlaserve {
namespace {

// Shared by all presets: 1 leading dense layer, 64 routed experts in 8 groups with 4 kept,
// top-6, 1 shared expert, sigmoid routing with scale 2.5, rope theta 1e4, vocab 32000.
nlohmann::json common_config() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}},
          {"model_type", "deepseek_v3"},
          {"vocab_size", 32000},
          {"first_k_dense_replace", 1},
          {"n_routed_experts", 64},
          {"n_group", 8},
          {"topk_group", 4},
          {"num_experts_per_tok", 6},
          {"n_shared_experts", 1},
          {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"},
          {"norm_topk_prob", true},
          {"routed_scaling_factor", 2.5},
          {"rope_theta", 10000.0},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", false},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"moe_layer_freq", 1},
          {"attention_bias", false},
          {"max_position_embeddings", 4096},
          {"num_nextn_predict_layers", 0},
          {"bos_token_id", 0},
          {"eos_token_id", 1},
          {"torch_dtype", "bfloat16"}};
}

// Kimi Linear in miniature: 4 layers, MLA (no rope) on layers 2 and 4, KDA on 1 and 3 with
// 4 heads of 32, a dense first layer, then 16 sigmoid-routed experts, top-4, 1 shared.
nlohmann::json kimi_linear_tiny() {
  return {{"architectures", {"KimiLinearForCausalLM"}},
          {"model_type", "kimi_linear"},
          {"vocab_size", 32000},
          {"hidden_size", 256},
          {"intermediate_size", 512},
          {"moe_intermediate_size", 64},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 4},
          {"q_lora_rank", nullptr},
          {"kv_lora_rank", 64},
          {"qk_nope_head_dim", 32},
          {"qk_rope_head_dim", 16},
          {"v_head_dim", 32},
          {"mla_use_nope", true},
          {"first_k_dense_replace", 1},
          {"moe_layer_freq", 1},
          {"num_experts", 16},
          {"num_experts_per_token", 4},
          {"num_shared_experts", 1},
          {"num_expert_group", 1},
          {"topk_group", 1},
          {"use_grouped_topk", false},
          {"moe_renormalize", true},
          {"moe_router_activation_func", "sigmoid"},
          {"routed_scaling_factor", 2.446},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 4096},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"bos_token_id", 0},
          {"eos_token_id", 1},
          {"torch_dtype", "bfloat16"},
          {"linear_attn_config",
           {{"full_attn_layers", {2, 4}},
            {"kda_layers", {1, 3}},
            {"num_heads", 4},
            {"head_dim", 32},
            {"short_conv_kernel_size", 4}}}};
}

// Kimi K3 in miniature, every K3 feature on: 5 layers (MLA on 2 and 5, KDA on 1, 3, 4) with
// the lower-bound KDA gate and full-rank output gates, q LoRA, MLA output gate, LatentMoE
// (experts in a 128-wide latent space, normed sum), SiTU, attention residuals in blocks of 2
// (so the last block is partial), routed scaling 1. Use --dtype mxfp4 for MXFP4 experts.
nlohmann::json kimi_k3_tiny() {
  nlohmann::json text = kimi_linear_tiny();
  text.merge_patch({{"num_hidden_layers", 5},
                    {"q_lora_rank", 96},
                    {"mla_use_output_gate", true},
                    {"routed_expert_hidden_size", 128},
                    {"latent_moe_use_norm", true},
                    {"hidden_act", "situ"},
                    {"activation_situ_beta", 4.0},
                    {"activation_situ_linear_beta", 25.0},
                    {"attn_res_block_size", 2},
                    {"routed_scaling_factor", 1.0},
                    {"num_shared_experts", 2},
                    {"linear_attn_config",
                     {{"full_attn_layers", {2, 5}},
                      {"kda_layers", {1, 3, 4}},
                      {"use_full_rank_gate", true},
                      {"gate_lower_bound", -5.0}}}});
  // K3's tokenizer layout: the 256 special ids after the ranks, [BOS] first, <|end_of_msg|> (the
  // end of a turn) the third, [PAD] the last.
  const int64_t specials = text["vocab_size"].get<int64_t>() - 256;
  text.merge_patch({{"bos_token_id", specials}, {"eos_token_id", specials + 2}, {"pad_token_id", specials + 255}});
  return {{"architectures", {"KimiK3ForConditionalGeneration"}},
          {"model_type", "kimi_k3"},
          {"tie_word_embeddings", false},
          {"bos_token_id", specials},
          {"eos_token_id", specials + 2},
          {"pad_token_id", specials + 255},
          {"text_config", text}};
}

// Merges `overrides` into each of `targets` that has the key; `where` names them for errors.
void merge_where_present(const std::vector<nlohmann::json*>& targets, const nlohmann::json& overrides,
                         const std::string& where) {
  MLA_CHECK(overrides.is_object(), "--override: {} must be a JSON object, got {}", where, overrides.dump());
  for (const auto& [key, value] : overrides.items()) {
    bool found = false;
    for (nlohmann::json* target : targets) {
      if (!target->contains(key)) continue;
      found = true;
      nlohmann::json& current = (*target)[key];
      if (value.is_object() && current.is_object())
        merge_where_present({&current}, value, fmt::format("'{}'", key));
      else
        current = value;
      if (current.is_null()) target->erase(key);  // merge patch: null removes the key
    }
    MLA_CHECK(found, "--override: {} has no key '{}'", where, key);
  }
}

}  // namespace

const char* const kModelPresetNames = "tiny | mini | small | kimi-linear-tiny | kimi-k3-tiny";

nlohmann::json apply_overrides(nlohmann::json config, const nlohmann::json& overrides) {
  std::vector<nlohmann::json*> targets = {&config};
  std::string where = "config.json";
  if (config.contains("text_config") && config["text_config"].is_object()) {
    targets.push_back(&config["text_config"]);
    where = "config.json (nor its text_config)";
  }
  merge_where_present(targets, overrides, where);
  return config;
}

nlohmann::json model_preset(const std::string& name) {
  if (name == "kimi-linear-tiny") return kimi_linear_tiny();
  if (name == "kimi-k3-tiny") return kimi_k3_tiny();
  nlohmann::json config = common_config();
  auto set_shape = [&](int hidden, int layers, int heads, int q_lora, int kv_lora, int nope, int rope, int v,
                       int moe_width, int dense_width) {
    config["hidden_size"] = hidden;
    config["num_hidden_layers"] = layers;
    config["num_attention_heads"] = heads;
    config["num_key_value_heads"] = heads;
    config["q_lora_rank"] = q_lora;
    config["kv_lora_rank"] = kv_lora;
    config["qk_nope_head_dim"] = nope;
    config["qk_rope_head_dim"] = rope;
    config["v_head_dim"] = v;
    config["moe_intermediate_size"] = moe_width;
    config["intermediate_size"] = dense_width;
  };
  if (name == "tiny")
    set_shape(256, 4, 8, 128, 64, 32, 16, 32, 64, 512);
  else if (name == "mini")
    set_shape(1024, 8, 16, 384, 256, 64, 32, 64, 256, 2816);
  else if (name == "small")
    set_shape(2048, 12, 16, 768, 512, 128, 64, 128, 768, 5632);
  else
    fail("unknown preset '{}' ({})", name, kModelPresetNames);
  return config;
}

}  // namespace mlaserve
