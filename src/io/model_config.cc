#include "io/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mmap_file.h"
#include "io/gguf_model.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// Typed accessors: a present key of the wrong type is an error naming the key.
const json* find_key(const json& config, const char* key) {
  auto found = config.find(key);
  return found == config.end() || found->is_null() ? nullptr : &*found;
}

constexpr int64_t kMaxLayers = 4096;  // the largest published models have under 100

int64_t get_int(const json& config, const char* key, std::optional<int64_t> fallback = {}) {
  const json* value = find_key(config, key);
  if (!value) {
    MLA_CHECK(fallback.has_value(), "config.json: required key '{}' is missing", key);
    return *fallback;
  }
  MLA_CHECK(value->is_number_integer(), "config.json: '{}' must be an integer, got {}", key, value->dump());
  // Sizes are multiplied together: each within 32 bits keeps every product in 64.
  const bool in_range = value->is_number_unsigned()
                            ? value->get<uint64_t>() <= uint64_t(INT32_MAX)
                            : value->get<int64_t>() >= INT32_MIN && value->get<int64_t>() <= INT32_MAX;
  MLA_CHECK(in_range, "config.json: '{}' {} is out of range", key, value->dump());
  return value->get<int64_t>();
}

double get_double(const json& config, const char* key, double fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MLA_CHECK(value->is_number(), "config.json: '{}' must be a number, got {}", key, value->dump());
  return value->get<double>();
}

bool get_bool(const json& config, const char* key, bool fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MLA_CHECK(value->is_boolean(), "config.json: '{}' must be true or false, got {}", key, value->dump());
  return value->get<bool>();
}

std::string get_string(const json& config, const char* key, const std::string& fallback) {
  const json* value = find_key(config, key);
  if (!value) return fallback;
  MLA_CHECK(value->is_string(), "config.json: '{}' must be a string, got {}", key, value->dump());
  return value->get<std::string>();
}

std::optional<int64_t> get_optional_token(const json& config, const char* key) {
  const json* value = find_key(config, key);
  if (!value) return std::nullopt;
  if (value->is_array() && !value->empty()) return (*value)[0].get<int64_t>();  // first of a list
  return get_int(config, key);
}

YarnScaling parse_rope_scaling(const json& scaling) {
  MLA_CHECK(scaling.is_object(), "config.json: 'rope_scaling' must be an object");
  const std::string type = get_string(scaling, "type", get_string(scaling, "rope_type", ""));
  MLA_CHECK(type == "yarn", "config.json: rope_scaling.type '{}' is not supported (only 'yarn')", type);
  YarnScaling yarn;
  yarn.factor = get_double(scaling, "factor", 1.0);
  yarn.original_max_position_embeddings = get_int(scaling, "original_max_position_embeddings", 4096);
  yarn.beta_fast = get_double(scaling, "beta_fast", 32.0);
  yarn.beta_slow = get_double(scaling, "beta_slow", 1.0);
  yarn.mscale = get_double(scaling, "mscale", 1.0);
  yarn.mscale_all_dim = get_double(scaling, "mscale_all_dim", 0.0);
  MLA_CHECK(yarn.factor > 0, "config.json: rope_scaling.factor must be positive");
  return yarn;
}

// visit(name, weights) for each compressed-tensors config_groups entry's "weights" object.
template <class Visit>
void for_each_group_weights(const json& quant, Visit visit) {
  const json* groups = find_key(quant, "config_groups");
  MLA_CHECK(groups && groups->is_object() && !groups->empty(),
            "config.json: quantization_config.config_groups is missing");
  for (const auto& [group_name, group] : groups->items()) {
    const json* weights = find_key(group, "weights");
    MLA_CHECK(weights, "config.json: config_groups.{}.weights is missing", group_name);
    visit(group_name, *weights);
  }
}

// compressed-tensors int-quantized: int8 weights, symmetric, one scale per output channel or
// per group of input columns. W8A8 checkpoints also declare input_activations (int8 per
// token, dynamic): mlaserve keeps activations in fp32 against the dequantised weights.
void parse_int8_groups(const json& quant, ModelConfig& config) {
  for_each_group_weights(quant, [&](const std::string& group_name, const json& weights) {
    const std::string strategy = get_string(weights, "strategy", "channel");
    MLA_CHECK(get_int(weights, "num_bits") == 8 && get_string(weights, "type", "int") == "int" &&
                  get_bool(weights, "symmetric", true) && (strategy == "channel" || strategy == "group"),
              "config.json: config_groups.{}.weights must be 8-bit symmetric int, channel or group strategy "
              "(int-quantized)",
              group_name);
    config.int8_group_size = strategy == "group" ? get_int(weights, "group_size") : 0;
    MLA_CHECK(strategy == "channel" || config.int8_group_size > 0,
              "config.json: config_groups.{}.weights.group_size must be positive", group_name);
  });
  config.quant = WeightQuant::Int8;
}

void parse_quantization(const json& quant, ModelConfig& config) {
  const std::string method = get_string(quant, "quant_method", "");
  if (method == "fp8") {
    const std::string format = get_string(quant, "fmt", "e4m3");
    MLA_CHECK(format == "e4m3", "config.json: quantization_config.fmt '{}' is not supported", format);
    config.quant = WeightQuant::Fp8Block;
    if (const json* block = find_key(quant, "weight_block_size")) {
      MLA_CHECK(block->is_array() && block->size() == 2 && (*block)[0].is_number_integer() &&
                    (*block)[1].is_number_integer() && (*block)[0].get<int64_t>() > 0 && (*block)[1].get<int64_t>() > 0,
                "config.json: quantization_config.weight_block_size must be two positive ints");
      config.fp8_block_out = (*block)[0].get<int64_t>();
      config.fp8_block_in = (*block)[1].get<int64_t>();
    }
    return;
  }
  MLA_CHECK(method == "compressed-tensors",
            "config.json: quantization_config.quant_method '{}' is not supported "
            "(fp8, compressed-tensors)",
            method);
  const std::string format = get_string(quant, "format", "");
  if (format == "mxfp4-pack-quantized") {  // E2M1 nibbles with an E8M0 scale per 32 (OCP MX)
    config.quant = WeightQuant::Mxfp4;
    return;
  }
  if (format == "int-quantized") return parse_int8_groups(quant, config);
  MLA_CHECK(format == "pack-quantized",
            "config.json: quantization_config.format '{}' is not supported (pack-quantized, "
            "mxfp4-pack-quantized, int-quantized)",
            format);
  for_each_group_weights(quant, [&](const std::string& group_name, const json& weights) {
    MLA_CHECK(get_int(weights, "num_bits") == 4 && get_string(weights, "type", "int") == "int" &&
                  get_bool(weights, "symmetric", true) && get_string(weights, "strategy", "group") == "group",
              "config.json: config_groups.{}.weights must be 4-bit symmetric int, group strategy", group_name);
    config.int4_group_size = get_int(weights, "group_size", 32);
    MLA_CHECK(config.int4_group_size > 0 && config.int4_group_size % 8 == 0,
              "config.json: config_groups.{}.weights.group_size {} must be a positive multiple of 8", group_name,
              config.int4_group_size);
  });
  config.quant = WeightQuant::Int4Group;
}

void parse_routing(const json& json_config, ModelConfig& config) {
  const std::string scoring = get_string(json_config, "scoring_func", "sigmoid");
  if (scoring == "sigmoid")
    config.scoring_func = ScoringFunc::Sigmoid;
  else if (scoring == "softmax")
    config.scoring_func = ScoringFunc::Softmax;
  else
    fail("config.json: scoring_func '{}' is not supported (sigmoid, softmax)", scoring);
  const std::string method = get_string(json_config, "topk_method", "noaux_tc");
  if (method == "noaux_tc")
    config.topk_method = TopkMethod::NoAuxTc;
  else if (method == "greedy")
    config.topk_method = TopkMethod::Greedy;
  else if (method == "group_limited_greedy")
    config.topk_method = TopkMethod::GroupLimitedGreedy;
  else
    fail("config.json: topk_method '{}' is not supported (noaux_tc, greedy, group_limited_greedy)", method);
}

void validate(const ModelConfig& config, const json& json_config) {
  auto positive = [](int64_t value, const char* key) {
    MLA_CHECK(value > 0, "config.json: '{}' must be positive, got {}", key, value);
  };
  positive(config.vocab_size, "vocab_size");
  positive(config.hidden_size, "hidden_size");
  positive(config.num_hidden_layers, "num_hidden_layers");
  MLA_CHECK(config.num_hidden_layers <= kMaxLayers, "config.json: 'num_hidden_layers' {} is above {}",
            config.num_hidden_layers, kMaxLayers);
  positive(config.num_attention_heads, "num_attention_heads");
  positive(config.kv_lora_rank, "kv_lora_rank");
  positive(config.qk_nope_head_dim, "qk_nope_head_dim");
  positive(config.v_head_dim, "v_head_dim");
  MLA_CHECK(config.qk_rope_head_dim > 0 && config.qk_rope_head_dim % 2 == 0,
            "config.json: 'qk_rope_head_dim' must be positive and even, got {}", config.qk_rope_head_dim);
  if (config.q_lora_rank) positive(*config.q_lora_rank, "q_lora_rank");
  if (config.first_k_dense_replace > 0) positive(config.intermediate_size, "intermediate_size");
  if (config.first_k_dense_replace < config.num_hidden_layers) {
    positive(config.moe_intermediate_size, "moe_intermediate_size");
    positive(config.n_routed_experts, "n_routed_experts");
    positive(config.num_experts_per_tok, "num_experts_per_tok");
    positive(config.n_group, "n_group");
    MLA_CHECK(config.n_routed_experts % config.n_group == 0,
              "config.json: n_routed_experts {} is not divisible by n_group {}", config.n_routed_experts,
              config.n_group);
    MLA_CHECK(config.topk_group >= 1 && config.topk_group <= config.n_group,
              "config.json: topk_group {} must be in [1, n_group={}]", config.topk_group, config.n_group);
    MLA_CHECK(config.num_experts_per_tok <= config.n_routed_experts / config.n_group * config.topk_group,
              "config.json: num_experts_per_tok {} exceeds the experts in topk_group groups",
              config.num_experts_per_tok);
  }
  MLA_CHECK(get_int(json_config, "moe_layer_freq", 1) == 1,
            "config.json: moe_layer_freq other than 1 is not supported");
  const std::string act = get_string(json_config, "hidden_act", "silu");
  MLA_CHECK(act == "silu" || (act == "situ" && config.is_kimi_linear()),
            "config.json: hidden_act '{}' is not supported (silu; situ for Kimi K3)", act);
  MLA_CHECK(!get_bool(json_config, "attention_bias", false), "config.json: attention_bias true is not supported");
  MLA_CHECK(config.rms_norm_eps > 0, "config.json: 'rms_norm_eps' must be positive");
}

// Kimi Linear spells some DeepSeek-V3 keys differently; read them into the same fields.
void parse_kimi_linear(const json& json_config, ModelConfig& config) {
  const json* linear = find_key(json_config, "linear_attn_config");
  MLA_CHECK(linear && linear->is_object(), "config.json: kimi_linear needs 'linear_attn_config'");
  KdaConfig kda;
  kda.num_heads = get_int(*linear, "num_heads");
  kda.head_dim = get_int(*linear, "head_dim");
  kda.short_conv_kernel_size = get_int(*linear, "short_conv_kernel_size", 4);
  MLA_CHECK(kda.num_heads > 0 && kda.head_dim > 0 && kda.short_conv_kernel_size >= 1,
            "config.json: linear_attn_config num_heads, head_dim and short_conv_kernel_size must be positive");
  kda.use_full_rank_gate = get_bool(*linear, "use_full_rank_gate", false);
  if (find_key(*linear, "gate_lower_bound")) kda.gate_lower_bound = get_double(*linear, "gate_lower_bound", 0.0);
  MLA_CHECK(config.num_hidden_layers > 0 && config.num_hidden_layers <= kMaxLayers,
            "config.json: 'num_hidden_layers' {} is not in [1, {}]", config.num_hidden_layers, kMaxLayers);
  kda.is_mla_layer.assign(size_t(config.num_hidden_layers), false);
  const json* full = find_key(*linear, "full_attn_layers");
  MLA_CHECK(full && full->is_array(), "config.json: linear_attn_config.full_attn_layers must be a list");
  for (const json& layer : *full) {
    MLA_CHECK(
        layer.is_number_integer() && layer.get<int64_t>() >= 1 && layer.get<int64_t>() <= config.num_hidden_layers,
        "config.json: full_attn_layers entry {} is not a layer number in [1, {}]", layer.dump(),
        config.num_hidden_layers);
    kda.is_mla_layer[size_t(layer.get<int64_t>() - 1)] = true;
  }
  config.kda = kda;
  config.mla_use_nope = get_bool(json_config, "mla_use_nope", false);
  config.mla_use_output_gate = get_bool(json_config, "mla_use_output_gate", false);
  if (find_key(json_config, "routed_expert_hidden_size")) {
    config.routed_expert_hidden_size = get_int(json_config, "routed_expert_hidden_size");
    MLA_CHECK(*config.routed_expert_hidden_size > 0, "config.json: 'routed_expert_hidden_size' must be positive");
  }
  config.latent_moe_use_norm = get_bool(json_config, "latent_moe_use_norm", false);
  if (find_key(json_config, "attn_res_block_size")) {
    config.attn_res_block_size = get_int(json_config, "attn_res_block_size");
    MLA_CHECK(*config.attn_res_block_size > 0, "config.json: 'attn_res_block_size' must be positive");
  }
  config.situ = get_string(json_config, "hidden_act", "silu") == "situ";  // validate() checks the value
  config.activation_situ_beta = get_double(json_config, "activation_situ_beta", 4.0);
  config.activation_situ_linear_beta = get_double(json_config, "activation_situ_linear_beta", 25.0);
  config.n_routed_experts = get_int(json_config, "num_experts", 0);
  config.n_shared_experts = get_int(json_config, "num_shared_experts", 0);
  config.num_experts_per_tok = get_int(json_config, "num_experts_per_token", 0);
  config.n_group = get_int(json_config, "num_expert_group", 1);
  config.norm_topk_prob = get_bool(json_config, "moe_renormalize", true);
  const std::string activation = get_string(json_config, "moe_router_activation_func", "sigmoid");
  MLA_CHECK(activation == "sigmoid", "config.json: moe_router_activation_func '{}' is not supported (sigmoid)",
            activation);
  config.scoring_func = ScoringFunc::Sigmoid;
  config.topk_method = TopkMethod::NoAuxTc;  // e_score_correction_bias chooses, the raw scores weigh
}

}  // namespace

int64_t KdaConfig::kda_layers() const { return int64_t(std::count(is_mla_layer.begin(), is_mla_layer.end(), false)); }

int64_t KdaConfig::state_floats() const {
  const int64_t width = num_heads * head_dim;
  return kda_layers() * (3 * width * (short_conv_kernel_size - 1) + num_heads * head_dim * head_dim);
}

double ModelConfig::softmax_scale() const {
  double scale = 1.0 / std::sqrt(double(qk_head_dim()));
  if (rope_scaling && rope_scaling->mscale_all_dim != 0.0) {
    const double mscale = yarn_get_mscale(rope_scaling->factor, rope_scaling->mscale_all_dim);
    scale *= mscale * mscale;
  }
  return scale;
}

ModelConfig parse_model_config(const json& outer_config) {
  MLA_CHECK(outer_config.is_object(), "config.json: not a JSON object");
  // Kimi K3 (KimiK3ForConditionalGeneration) wraps a kimi_linear text model in text_config;
  // its vision tower is not run, and its tensors live under "language_model.".
  const bool k3 = get_string(outer_config, "model_type", "") == "kimi_k3";
  const json* text_config = k3 ? find_key(outer_config, "text_config") : nullptr;
  MLA_CHECK(!k3 || (text_config && text_config->is_object()), "config.json: kimi_k3 needs a 'text_config' object");
  const json& json_config = k3 ? *text_config : outer_config;
  ModelConfig config;
  config.model_type = get_string(json_config, "model_type", "");
  MLA_CHECK(!k3 || config.model_type == "kimi_linear",
            "config.json: kimi_k3's text_config.model_type must be "
            "kimi_linear, got '{}'",
            config.model_type);
  MLA_CHECK(config.model_type == "deepseek_v3" || config.model_type == "kimi_k2" || config.model_type == "kimi_linear",
            "config.json: model_type '{}' is not supported (deepseek_v3, kimi_k2, kimi_linear)", config.model_type);
  config.vocab_size = get_int(json_config, "vocab_size");
  config.hidden_size = get_int(json_config, "hidden_size");
  config.intermediate_size = get_int(json_config, "intermediate_size", 0);
  config.moe_intermediate_size = get_int(json_config, "moe_intermediate_size", 0);
  config.num_hidden_layers = get_int(json_config, "num_hidden_layers");
  config.num_nextn_predict_layers = get_int(json_config, "num_nextn_predict_layers", 0);
  config.num_attention_heads = get_int(json_config, "num_attention_heads");
  if (find_key(json_config, "q_lora_rank")) config.q_lora_rank = get_int(json_config, "q_lora_rank");
  config.kv_lora_rank = get_int(json_config, "kv_lora_rank");
  config.qk_nope_head_dim = get_int(json_config, "qk_nope_head_dim");
  config.qk_rope_head_dim = get_int(json_config, "qk_rope_head_dim");
  config.v_head_dim = get_int(json_config, "v_head_dim");
  config.n_routed_experts = get_int(json_config, "n_routed_experts", 0);
  config.n_shared_experts = get_int(json_config, "n_shared_experts", 0);
  config.num_experts_per_tok = get_int(json_config, "num_experts_per_tok", 0);
  config.n_group = get_int(json_config, "n_group", 1);
  config.topk_group = get_int(json_config, "topk_group", 1);
  config.first_k_dense_replace = get_int(json_config, "first_k_dense_replace", 0);
  config.norm_topk_prob = get_bool(json_config, "norm_topk_prob", true);
  config.routed_scaling_factor = get_double(json_config, "routed_scaling_factor", 1.0);
  parse_routing(json_config, config);
  config.rope_theta = get_double(json_config, "rope_theta", 10000.0);
  if (const json* scaling = find_key(json_config, "rope_scaling")) config.rope_scaling = parse_rope_scaling(*scaling);
  config.rms_norm_eps = get_double(json_config, "rms_norm_eps", 1e-6);
  config.tie_word_embeddings = get_bool(json_config, "tie_word_embeddings", false);
  config.max_position_embeddings = get_int(json_config, "max_position_embeddings", 4096);
  config.bos_token_id = get_optional_token(json_config, "bos_token_id");
  config.eos_token_id = get_optional_token(json_config, "eos_token_id");
  if (const json* quant = find_key(json_config, "quantization_config")) parse_quantization(*quant, config);
  if (config.model_type == "kimi_linear") parse_kimi_linear(json_config, config);
  if (k3) {
    config.model_type = "kimi_k3";
    config.weight_prefix = "language_model.";
  }
  validate(config, json_config);
  return config;
}

namespace {

// DIR/config.json, or the keys of a GGUF file as config.json would have them.
json read_config_json(const std::string& model_dir) {
  if (is_gguf_path(model_dir)) return gguf_config_json(open_gguf(model_dir));
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  try {
    return json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail("'{}': not valid JSON: {}", path, e.what());
  }
}

}  // namespace

ModelConfig load_model_config(const std::string& model_dir) { return parse_model_config(read_config_json(model_dir)); }

BlockDraftConfig load_block_draft_config(const std::string& model_dir) {
  const json config = read_config_json(model_dir);
  BlockDraftConfig draft;
  draft.vocab_size = get_int(config, "vocab_size");
  draft.hidden_size = get_int(config, "hidden_size");
  draft.intermediate_size = get_int(config, "intermediate_size");
  draft.num_hidden_layers = get_int(config, "num_hidden_layers");
  draft.num_attention_heads = get_int(config, "num_attention_heads");
  draft.num_key_value_heads = get_int(config, "num_key_value_heads", draft.num_attention_heads);
  MLA_CHECK(draft.num_attention_heads > 0 && draft.num_key_value_heads > 0 &&
                draft.num_attention_heads % draft.num_key_value_heads == 0,
            "config.json: num_attention_heads {} is not a multiple of num_key_value_heads {}",
            draft.num_attention_heads, draft.num_key_value_heads);
  draft.head_dim = get_int(config, "head_dim", draft.hidden_size / draft.num_attention_heads);
  draft.rms_norm_eps = get_double(config, "rms_norm_eps", draft.rms_norm_eps);
  draft.rope_theta = get_double(config, "rope_theta", draft.rope_theta);
  MLA_CHECK(find_key(config, "rope_scaling") == nullptr, "config.json: a block draft's rope_scaling is not supported");
  MLA_CHECK(!get_bool(config, "attention_bias", false), "config.json: a block draft's attention_bias is not supported");
  const json* block = find_key(config, "dflash_config");
  MLA_CHECK(block != nullptr && block->is_object(), "config.json: 'dflash_config' (an object) is missing");
  draft.block_size = get_int(*block, "block_size", get_int(config, "block_size", std::nullopt));
  MLA_CHECK(draft.block_size >= 2, "config.json: block_size must be at least 2, got {}", draft.block_size);
  draft.mask_token_id = int32_t(get_int(*block, "mask_token_id"));
  MLA_CHECK(draft.mask_token_id >= 0 && draft.mask_token_id < draft.vocab_size,
            "config.json: mask_token_id {} is outside the vocabulary of {}", draft.mask_token_id, draft.vocab_size);
  const json* layers = find_key(*block, "target_layer_ids");
  MLA_CHECK(layers != nullptr && layers->is_array() && !layers->empty(),
            "config.json: dflash_config.target_layer_ids (a non-empty list) is missing");
  for (const json& layer : *layers) {
    MLA_CHECK(layer.is_number_integer() && layer.get<int64_t>() >= 0,
              "config.json: target_layer_ids must be layer indices, got {}", layer.dump());
    draft.target_layer_ids.push_back(layer.get<int>());
  }
  return draft;
}

}  // namespace mlaserve
