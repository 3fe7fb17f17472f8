#include <fmt/format.h>

#include "base/error.h"
#include "io/linear_weight.h"
#include "model/deepseek_v3.h"
#include "model/shard_layers.h"
#include "parallel/shard_plan.h"

namespace mlaserve {
namespace {

MoeWeights load_moe(WeightLoader& loader, const ModelConfig& config, const std::string& prefix) {
  const int64_t hidden = config.hidden_size;
  MoeWeights moe;
  moe.gate = loader.dense(prefix + ".gate.weight", config.n_routed_experts, hidden);
  if (config.topk_method == TopkMethod::NoAuxTc)
    moe.e_score_correction_bias = loader.vector(prefix + ".gate.e_score_correction_bias", config.n_routed_experts);
  for (int64_t e = 0; e < config.n_routed_experts; ++e)
    moe.experts.push_back(
        load_mlp_weights(loader, fmt::format("{}.experts.{}", prefix, e), hidden, config.moe_intermediate_size));
  if (config.n_shared_experts > 0)
    moe.shared_experts = load_mlp_weights(loader, prefix + ".shared_experts", hidden,
                                          config.n_shared_experts * config.moe_intermediate_size);
  return moe;
}

DecoderLayerWeights load_decoder_layer(WeightLoader& loader, const ModelConfig& config, int64_t index) {
  const std::string prefix = fmt::format("model.layers.{}", index);
  const int64_t hidden = config.hidden_size;
  DecoderLayerWeights layer;
  layer.input_layernorm = loader.vector(prefix + ".input_layernorm.weight", hidden);
  layer.post_attention_layernorm = loader.vector(prefix + ".post_attention_layernorm.weight", hidden);
  layer.self_attn = load_mla_weights(loader, config, prefix + ".self_attn");
  if (config.is_moe_layer(index))
    layer.moe = load_moe(loader, config, prefix + ".mlp");
  else
    layer.mlp = load_mlp_weights(loader, prefix + ".mlp", hidden, config.intermediate_size);
  return layer;
}

NextTokenWeights load_next_token_weights(WeightLoader& loader, const ModelConfig& config) {
  const int64_t hidden = config.hidden_size;
  const std::string prefix = fmt::format("model.layers.{}", config.num_hidden_layers);
  NextTokenWeights module;
  module.enorm = loader.vector(prefix + ".enorm.weight", hidden);
  module.hnorm = loader.vector(prefix + ".hnorm.weight", hidden);
  module.eh_proj = loader.linear(prefix + ".eh_proj", hidden, 2 * hidden);
  module.layer = load_decoder_layer(loader, config, config.num_hidden_layers);
  module.shared_head_norm = loader.vector(prefix + ".shared_head.norm.weight", hidden);
  return module;
}

// Tensors a checkpoint may carry that no forward pass uses: MTP layers after the first, the
// copies of the embedding and head DeepSeek-V3 stores in its MTP layer, and rotary inv_freq
// buffers.
bool ignorable(const std::string& name, const ModelConfig& config) {
  const std::string prefix = "model.layers.";
  if (config.num_nextn_predict_layers > 0 && name.starts_with(prefix)) {
    const size_t end = name.find_first_not_of("0123456789", prefix.size());
    if (end > prefix.size() && end != std::string::npos && name[end] == '.') {
      const int64_t layer = std::stoll(name.substr(prefix.size(), end - prefix.size()));
      const std::string rest = name.substr(end + 1);
      return layer > config.num_hidden_layers ||
             (layer == config.num_hidden_layers &&
              (rest == "embed_tokens.weight" || rest.starts_with("shared_head.head.")));
    }
  }
  return name.ends_with("rotary_emb.inv_freq");
}

}  // namespace

DeepseekV3Weights load_deepseek_v3_weights(Checkpoint& checkpoint, const ModelConfig& config, WeightLoader& loader) {
  const int64_t hidden = config.hidden_size;
  DeepseekV3Weights weights;
  weights.embed_tokens = loader.dense("model.embed_tokens.weight", config.vocab_size, hidden);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i)
    weights.layers.push_back(load_decoder_layer(loader, config, i));
  if (config.num_nextn_predict_layers > 0) weights.next_token = load_next_token_weights(loader, config);
  weights.norm = loader.vector("model.norm.weight", hidden);
  if (config.tie_word_embeddings) {
    MLA_CHECK(!checkpoint.contains("lm_head.weight"),
              "unexpected tensor 'lm_head.weight': config.json has tie_word_embeddings true");
    weights.lm_head = weights.embed_tokens;
  } else {
    weights.lm_head = loader.linear("lm_head", config.vocab_size, hidden);
  }
  for (const auto& name : checkpoint.unused_names())
    MLA_CHECK(ignorable(name, config), "unexpected tensor '{}' (shape {}) not used by {}", name,
              checkpoint.all().at(name)->shape_string(), config.model_type);
  return weights;
}

}  // namespace mlaserve

namespace mlaserve {
DeepseekV3Weights shard_deepseek_v3_weights(const DeepseekV3Weights& full, const ModelConfig& config,
                                            const ShardSpec& spec, WeightCopies& storage, const Checkpoint* source) {
  MLA_CHECK(spec.size >= 1 && spec.rank >= 0 && spec.rank < spec.size, "rank {} outside a world of {}", spec.rank,
            spec.size);
  if (spec.size == 1 && !spec.copy_weights) return full;
  const Range heads = heads_of_rank(config.num_attention_heads, spec.size, spec.rank);
  MLA_CHECK(config.vocab_size >= spec.size, "vocab_size {} is smaller than the world size {}", config.vocab_size,
            spec.size);
  const VocabSlice vocab = VocabSlice::of_rank(config.vocab_size, spec.size, spec.rank);
  const ShardContext context{spec, storage, source};
  DeepseekV3Weights out;
  out.norm = full.norm;
  if (vocab.size() > 0) {
    out.embed_tokens = full.embed_tokens.rows_view(vocab.begin, vocab.end);
    out.lm_head = full.lm_head.rows_view(vocab.begin, vocab.end);
    // An untied LM head is read like any projection (the embedding rows stay row-major for lookups).
    if (!config.tie_word_embeddings) out.lm_head = copied_if_asked(out.lm_head, context);
  }
  for (const auto& layer : full.layers) {
    DecoderLayerWeights sharded = layer;
    sharded.self_attn = shard_mla_weights(layer.self_attn, config, heads, context);
    if (layer.mlp) sharded.mlp = shard_mlp_weights(*layer.mlp, context);
    if (layer.moe) sharded.moe = shard_moe_weights(*layer.moe, context);
    out.layers.push_back(std::move(sharded));
    log_shard_progress(spec, out.layers.size(), full.layers.size());
  }
  return out;
}

}  // namespace mlaserve
