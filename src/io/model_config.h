// config.json -> ModelConfig for DeepseekV3ForCausalLM (model_type deepseek_v3 and kimi_k2)
// and KimiLinearForCausalLM (kimi_linear: KDA + MLA hybrid).
// Field names are Hugging Face's config keys; each comment says what the key changes.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/latent_cache_view.h"  // CacheDType
#include "kernels/moe_router.h"         // ScoringFunc, TopkMethod
#include "kernels/rope.h"               // YarnScaling

namespace mlaserve {

enum class WeightQuant { None, Fp8Block, Int4Group, Mxfp4, Int8 };

// Kimi Linear's linear_attn_config: which layers are KDA and their shape.
struct KdaConfig {
  std::vector<bool> is_mla_layer;  // from full_attn_layers (1-based in config.json)
  int64_t num_heads = 0;           // KDA heads
  int64_t head_dim = 0;            // per-head key and value width
  int64_t short_conv_kernel_size = 4;
  bool use_full_rank_gate = false;         // K3: output gate g_proj(x) instead of g_b(g_a(x))
  std::optional<double> gate_lower_bound;  // K3: g = lb * sigmoid(exp(A_log) * f), not -exp(A_log) * softplus(f)
  int64_t kda_layers() const;
  int64_t state_floats() const;  // one sequence, all KDA layers: conv windows + recurrent state
};

struct ModelConfig {
  std::string model_type;             // deepseek_v3 | kimi_k2 | kimi_linear
  int64_t vocab_size = 0;             // rows of embed_tokens and lm_head
  int64_t hidden_size = 0;            // residual stream width
  int64_t intermediate_size = 0;      // dense MLP width (first_k_dense_replace layers)
  int64_t moe_intermediate_size = 0;  // width of each routed expert (and of each shared expert)
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0;  // MTP layers stored after the last layer; not run
  int64_t num_attention_heads = 0;
  std::optional<int64_t> q_lora_rank;  // null: direct q_proj (DeepSeek-V2-Lite)
  int64_t kv_lora_rank = 0;            // width of the compressed (latent) KV
  int64_t qk_nope_head_dim = 0;        // per-head query/key width without rotary embedding
  int64_t qk_rope_head_dim = 0;        // per-head rotary width; the rope key is shared by heads
  int64_t v_head_dim = 0;              // per-head value width
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;        // shared experts fused into one MLP of n x moe width
  int64_t num_experts_per_tok = 0;     // top-k
  int64_t n_group = 1;                 // expert groups for group-limited routing
  int64_t topk_group = 1;              // groups kept per token
  int64_t first_k_dense_replace = 0;   // leading layers with a dense MLP instead of MoE
  bool norm_topk_prob = true;          // renormalise the top-k weights to sum to 1
  double routed_scaling_factor = 1.0;  // multiplies the routed experts' weights
  ScoringFunc scoring_func = ScoringFunc::Sigmoid;
  TopkMethod topk_method = TopkMethod::NoAuxTc;  // noaux_tc: e_score_correction_bias for choice
  double rope_theta = 10000.0;
  std::optional<YarnScaling> rope_scaling;  // only type "yarn" is supported
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;  // lm_head reuses embed_tokens
  int64_t max_position_embeddings = 4096;
  std::optional<int64_t> bos_token_id, eos_token_id;
  WeightQuant quant = WeightQuant::None;             // quantization_config.quant_method
  int64_t fp8_block_out = 128, fp8_block_in = 128;   // quantization_config.weight_block_size
  int64_t int4_group_size = 32;                      // compressed-tensors weights.group_size
  int64_t int8_group_size = 0;                       // int-quantized weights.group_size; 0: strategy channel
  std::optional<KdaConfig> kda;                      // kimi_linear only
  bool mla_use_nope = false;                         // kimi_linear: the 64-wide "rope" slices are not rotated
  bool mla_use_output_gate = false;                  // K3: MLA output *= sigmoid(g_proj(x)) before o_proj
  std::optional<int64_t> routed_expert_hidden_size;  // K3 LatentMoE width (routed experts run there)
  bool latent_moe_use_norm = false;                  // K3: RMSNorm of the routed sum in the latent space
  bool situ = false;                                 // hidden_act "situ" (K3)
  double activation_situ_beta = 4.0, activation_situ_linear_beta = 25.0;
  std::optional<int64_t> attn_res_block_size;  // K3 attention residuals: layers per block
  std::string weight_prefix;                   // "language_model." for kimi_k3 (a multimodal wrapper)

  bool is_kimi_linear() const { return kda.has_value(); }
  // Recurrent state one sequence carries (KDA conv windows and S matrices, fp32); 0 for MLA-only models.
  int64_t recurrent_state_bytes() const { return kda ? kda->state_floats() * 4 : 0; }

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  int64_t kv_latent_dim() const { return kv_lora_rank + qk_rope_head_dim; }  // cached per token
  // Layers with a latent cache: every layer, or Kimi Linear's MLA layers (cache rows are
  // indexed by the MLA layer's ordinal among them).
  int64_t cache_layers() const { return kda ? num_hidden_layers - kda->kda_layers() : num_hidden_layers; }
  // Latent cache bytes one token costs: cache_layers rows of the cache dtype's layout.
  int64_t kv_bytes_per_token(CacheDType dtype) const {
    return cache_layers() * cache_row_bytes(dtype, kv_latent_dim(), qk_rope_head_dim);
  }
  bool is_moe_layer(int64_t layer) const { return layer >= first_k_dense_replace; }
  double softmax_scale() const;  // qk_head_dim^-1/2, times mscale(factor, mscale_all_dim)^2
};

ModelConfig parse_model_config(const nlohmann::json& config);  // throws Error naming the key
ModelConfig load_model_config(const std::string& model_dir);   // reads DIR/config.json

// A block draft model's config.json (z-lab's DFlashDraftModel: Qwen3-style layers, and
// block_size, dflash_config.mask_token_id and .target_layer_ids).
struct BlockDraftConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // default hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 1e6;
  int64_t block_size = 0;  // positions a draft forward fills: the last committed token, then masks
  int32_t mask_token_id = 0;
  std::vector<int> target_layer_ids;  // the target's decoder layers whose states are the context
};
BlockDraftConfig load_block_draft_config(const std::string& model_dir);  // throws Error naming the key

}  // namespace mlaserve
