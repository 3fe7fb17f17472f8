#include "model/deepseek_v3.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include "base/error.h"
#include "kernels/linear.h"
#include "kernels/norm.h"

namespace mlaserve {
namespace {

MlaShape mla_shape_of(const ModelConfig& config) {
  return MlaShape{config.hidden_size,      config.num_attention_heads, config.kv_lora_rank,
                  config.qk_nope_head_dim, config.qk_rope_head_dim,    config.v_head_dim,
                  config.rms_norm_eps,     float(config.softmax_scale())};
}

}  // namespace

DeepseekV3Model::DeepseekV3Model(const std::string& model_dir, ModelConfig config)
    : config_(std::move(config)),
      checkpoint_(model_dir),
      loader_(checkpoint_, config_),
      weights_(load_deepseek_v3_weights(checkpoint_, config_, loader_)),
      rope_(config_),
      mla_shape_(mla_shape_of(config_)),
      router_(RouterParams::from_config(config_)) {}

std::unique_ptr<DeepseekV3Model> DeepseekV3Model::load(const std::string& model_dir) {
  ModelConfig config = load_model_config(model_dir);
  auto model = std::unique_ptr<DeepseekV3Model>(new DeepseekV3Model(model_dir, std::move(config)));
  spdlog::info("loaded {} from '{}': {} layers, {:.2f} GB of weights", model->config_.model_type,
               model_dir, model->config_.num_hidden_layers, double(model->weight_bytes()) / 1e9);
  return model;
}

size_t DeepseekV3Model::weight_bytes() const {
  size_t total = weights_.embed_tokens.bytes();
  for (const auto& layer : weights_.layers) {
    const MlaWeights& attn = layer.self_attn;
    for (const auto* w : {&attn.kv_a_proj_with_mqa, &attn.kv_b_proj, &attn.o_proj}) total += w->bytes();
    for (const auto& w : {attn.q_proj, attn.q_a_proj, attn.q_b_proj})
      if (w) total += w->bytes();
    auto mlp_bytes = [](const MlpWeights& mlp) {
      return mlp.gate_proj.bytes() + mlp.up_proj.bytes() + mlp.down_proj.bytes();
    };
    if (layer.mlp) total += mlp_bytes(*layer.mlp);
    if (layer.moe) {
      total += layer.moe->gate.bytes();
      for (const auto& expert : layer.moe->experts) total += mlp_bytes(expert);
      if (layer.moe->shared_experts) total += mlp_bytes(*layer.moe->shared_experts);
    }
  }
  if (!config_.tie_word_embeddings) total += weights_.lm_head.bytes();
  return total;
}

void DeepseekV3Model::forward(std::span<const int32_t> tokens, int64_t start_position,
                              const LatentCacheView& cache, bool all_logits, float* logits,
                              MlaPath path) const {
  const int64_t n_tokens = int64_t(tokens.size()), hidden = config_.hidden_size;
  MLA_CHECK(n_tokens > 0, "forward needs at least one token");
  MLA_CHECK(start_position + n_tokens <= cache.capacity(),
            "sequence of {} tokens exceeds the cache capacity {}", start_position + n_tokens,
            cache.capacity());
  std::vector<float> residual(size_t(n_tokens * hidden));  // [n_tokens, hidden]
  std::vector<float> normed(residual.size()), mixed(residual.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    MLA_CHECK(tokens[t] >= 0 && tokens[t] < config_.vocab_size, "token id {} is outside [0, {})",
              tokens[t], config_.vocab_size);
    dequantize_row(weights_.embed_tokens, tokens[t], residual.data() + t * hidden);
  }
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const DecoderLayerWeights& layer = weights_.layers[i];
    rms_norm(residual.data(), hidden, layer.input_layernorm, n_tokens, hidden,
             config_.rms_norm_eps, normed.data(), hidden);
    const MlaInput input{normed.data(), n_tokens, start_position, cache, i};
    mla_forward(mla_shape_, layer.self_attn, rope_, input, path, mixed.data());
    for (size_t j = 0; j < residual.size(); ++j) residual[j] += mixed[j];
    rms_norm(residual.data(), hidden, layer.post_attention_layernorm, n_tokens, hidden,
             config_.rms_norm_eps, normed.data(), hidden);
    if (layer.moe)
      moe_forward(router_, *layer.moe, normed.data(), n_tokens, mixed.data());
    else
      mlp_forward(*layer.mlp, normed.data(), n_tokens, mixed.data());
    for (size_t j = 0; j < residual.size(); ++j) residual[j] += mixed[j];
  }
  const int64_t first_out = all_logits ? 0 : n_tokens - 1;
  const int64_t n_out = n_tokens - first_out;
  rms_norm(residual.data() + first_out * hidden, hidden, weights_.norm, n_out, hidden,
           config_.rms_norm_eps, normed.data(), hidden);
  linear(weights_.lm_head, normed.data(), n_out, logits);
}

SequenceCache::SequenceCache(const ModelConfig& config, int64_t capacity)
    : storage_(size_t(capacity * config.num_hidden_layers * config.kv_latent_dim())) {
  view_.pool = storage_.data();
  view_.block_table = &block_id_;
  view_.n_blocks = 1;
  view_.block_size = capacity;
  view_.n_layers = config.num_hidden_layers;
  view_.latent_dim = config.kv_latent_dim();
}

}  // namespace mlaserve
