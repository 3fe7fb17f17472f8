#include "tools/model_presets.h"

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

}  // namespace

nlohmann::json model_preset(const std::string& name) {
  nlohmann::json config = common_config();
  auto set_shape = [&](int hidden, int layers, int heads, int q_lora, int kv_lora, int nope, int rope,
                       int v, int moe_width, int dense_width) {
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
    fail("unknown preset '{}' (tiny, mini, small)", name);
  return config;
}

}  // namespace mlaserve
