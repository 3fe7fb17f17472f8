// The published config.json files of the models the planner knows by name (the keys that
// change parameter counts, cache and state sizes; values as released by their authors).
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tools/plan/model_spec.h"

namespace mlaserve {
namespace {

// deepseek-ai/DeepSeek-V3 config.json (FP8 block-scaled weights; 1 MTP layer, not counted).
const char* const kDeepseekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
  "vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_nextn_predict_layers": 1, "num_attention_heads": 128, "num_key_value_heads": 128,
  "n_shared_experts": 1, "n_routed_experts": 256, "routed_scaling_factor": 2.5, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc",
  "n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 3,
  "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 163840,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "rope_theta": 10000, "bos_token_id": 0, "eos_token_id": 1,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
})";

// moonshotai/Kimi-K2-Instruct config.json (FP8 block-scaled weights).
const char* const kKimiK2 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2",
  "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
  "num_hidden_layers": 61, "num_nextn_predict_layers": 0, "num_attention_heads": 64, "num_key_value_heads": 64,
  "n_shared_experts": 1, "n_routed_experts": 384, "routed_scaling_factor": 2.827, "kv_lora_rank": 512,
  "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128, "topk_method": "noaux_tc",
  "n_group": 1, "topk_group": 1, "num_experts_per_tok": 8, "moe_layer_freq": 1, "first_k_dense_replace": 1,
  "norm_topk_prob": true, "scoring_func": "sigmoid", "hidden_act": "silu", "max_position_embeddings": 131072,
  "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "rope_theta": 50000.0, "bos_token_id": 163584, "eos_token_id": 163585,
  "rope_scaling": {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
})";

// moonshotai/Kimi-K3 config.json, text_config (the vision tower is not planned). MXFP4 routed
// experts, BF16 elsewhere.
const char* const kKimiK3 = R"({
  "architectures": ["KimiK3ForConditionalGeneration"], "model_type": "kimi_k3", "tie_word_embeddings": false,
  "text_config": {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
    "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 33792, "moe_intermediate_size": 3072,
    "num_hidden_layers": 93, "num_attention_heads": 96, "num_key_value_heads": 96, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "mla_use_nope": true, "mla_use_output_gate": true, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "num_experts": 896, "num_experts_per_token": 16, "num_shared_experts": 2, "num_expert_group": 1, "topk_group": 1,
    "routed_expert_hidden_size": 3584, "latent_moe_use_norm": true, "moe_renormalize": true,
    "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 1.0, "topk_method": "noaux_tc",
    "hidden_act": "situ", "activation_situ_beta": 4.0, "activation_situ_linear_beta": 25.0, "attn_res_block_size": 12,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "max_position_embeddings": 1048576, "tie_word_embeddings": false,
    "num_nextn_predict_layers": 0, "bos_token_id": 163584, "eos_token_id": 163586,
    "linear_attn_config": {
      "full_attn_layers": [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 68, 72, 76, 80, 84, 88, 92, 93],
      "num_heads": 96, "head_dim": 128, "short_conv_kernel_size": 4, "use_full_rank_gate": true, "gate_lower_bound": -5.0},
    "quantization_config": {
      "quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
      "config_groups": {"group_0": {"format": "mxfp4-pack-quantized", "targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "float", "symmetric": true, "strategy": "group", "group_size": 32, "scale_dtype": "torch.uint8"}}},
      "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*", "re:.*lm_head.*"]}
  }
})";

}  // namespace

nlohmann::json known_model_config(const std::string& name) {
  if (name == "deepseek-v3") return nlohmann::json::parse(kDeepseekV3);
  if (name == "kimi-k2") return nlohmann::json::parse(kKimiK2);
  if (name == "kimi-k3") return nlohmann::json::parse(kKimiK3);
  fail("unknown model '{}': give a config.json path or one of deepseek-v3, kimi-k2, kimi-k3", name);
}

}  // namespace mlaserve
