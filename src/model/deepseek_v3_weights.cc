#include <fmt/format.h>


#include "base/error.h"
#include "io/linear_weight.h"
#include "model/deepseek_v3.h"
#include "parallel/shard_plan.h"

namespace mlaserve {
namespace {

MoeWeights load_moe(WeightLoader& loader, const ModelConfig& config, const std::string& prefix) {
  const int64_t hidden = config.hidden_size;
  MoeWeights moe;
  moe.gate = loader.dense(prefix + ".gate.weight", config.n_routed_experts, hidden);
  if (config.topk_method == TopkMethod::NoAuxTc)
    moe.e_score_correction_bias = loader.vector(prefix + ".gate.e_score_correction_bias",
                                                config.n_routed_experts);
  for (int64_t e = 0; e < config.n_routed_experts; ++e)
    moe.experts.push_back(load_mlp_weights(loader, fmt::format("{}.experts.{}", prefix, e), hidden,
                                   config.moe_intermediate_size));
  if (config.n_shared_experts > 0)
    moe.shared_experts = load_mlp_weights(loader, prefix + ".shared_experts", hidden,
                                  config.n_shared_experts * config.moe_intermediate_size);
  return moe;
}

// Tensors a checkpoint may carry that the forward pass does not use: multi-token-prediction
// layers (indices >= num_hidden_layers) and rotary inv_freq buffers.
bool ignorable(const std::string& name, const ModelConfig& config) {
  const std::string prefix = "model.layers.";
  if (config.num_nextn_predict_layers > 0 && name.starts_with(prefix)) {
    const size_t end = name.find_first_not_of("0123456789", prefix.size());
    if (end > prefix.size() && end != std::string::npos && name[end] == '.')
      return std::stoll(name.substr(prefix.size(), end - prefix.size())) >= config.num_hidden_layers;
  }
  return name.ends_with("rotary_emb.inv_freq");
}

}  // namespace

DeepseekV3Weights load_deepseek_v3_weights(Checkpoint& checkpoint, const ModelConfig& config,
                                           WeightLoader& loader) {
  const int64_t hidden = config.hidden_size;
  DeepseekV3Weights weights;
  weights.embed_tokens = loader.dense("model.embed_tokens.weight", config.vocab_size, hidden);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = fmt::format("model.layers.{}", i);
    DecoderLayerWeights layer;
    layer.input_layernorm = loader.vector(prefix + ".input_layernorm.weight", hidden);
    layer.post_attention_layernorm = loader.vector(prefix + ".post_attention_layernorm.weight", hidden);
    layer.self_attn = load_mla_weights(loader, config, prefix + ".self_attn");
    if (config.is_moe_layer(i))
      layer.moe = load_moe(loader, config, prefix + ".mlp");
    else
      layer.mlp = load_mlp_weights(loader, prefix + ".mlp", hidden, config.intermediate_size);
    weights.layers.push_back(std::move(layer));
  }
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
namespace {

int64_t split_alignment(const LinearWeight& weight) {
  return weight.format == WeightFormat::Int4Group || weight.format == WeightFormat::Mxfp4 ? weight.group_size : 1;
}

// Gate/up rows and down columns [i0, i1) of the intermediate dimension.
MlpWeights shard_mlp(const MlpWeights& mlp, const ShardSpec& spec, std::deque<std::vector<uint8_t>>& storage,
                     const Checkpoint* source) {
  const Range part = even_split(mlp.gate_proj.rows, spec.size, spec.rank, split_alignment(mlp.down_proj));
  MLA_CHECK(part.size() > 0, "an MLP of width {} cannot be split {} ways", mlp.gate_proj.rows, spec.size);
  return MlpWeights{mlp.gate_proj.rows_view(part.begin, part.end), mlp.up_proj.rows_view(part.begin, part.end),
                    compact_columns(mlp.down_proj.cols_view(part.begin, part.end), storage, source)};
}

MlaWeights shard_mla(const MlaWeights& mla, const ModelConfig& config, const Range& heads,
                     std::deque<std::vector<uint8_t>>& storage,
                     const Checkpoint* source) {
  const int64_t qk = config.qk_head_dim(), kv = config.qk_nope_head_dim + config.v_head_dim, v = config.v_head_dim;
  MlaWeights out = mla;  // q_a_proj, kv_a_proj_with_mqa and the norms are replicated
  if (mla.q_proj) out.q_proj = mla.q_proj->rows_view(heads.begin * qk, heads.end * qk);
  if (mla.q_b_proj) out.q_b_proj = mla.q_b_proj->rows_view(heads.begin * qk, heads.end * qk);
  out.kv_b_proj = mla.kv_b_proj.rows_view(heads.begin * kv, heads.end * kv);
  out.o_proj = compact_columns(mla.o_proj.cols_view(heads.begin * v, heads.end * v), storage, source);
  return out;
}

MoeWeights shard_moe(const MoeWeights& moe, const ShardSpec& spec, std::deque<std::vector<uint8_t>>& storage,
                     const Checkpoint* source) {
  MoeWeights out = moe;  // the router and its bias are replicated: every rank routes alike
  if (spec.expert_parallel) {
    const Range experts = even_split(int64_t(moe.experts.size()), spec.size, spec.rank);
    out.first_owned_expert = experts.begin;
    out.end_owned_expert = experts.end;
  } else {
    for (auto& expert : out.experts) expert = shard_mlp(expert, spec, storage, source);
  }
  if (moe.shared_experts) out.shared_experts = shard_mlp(*moe.shared_experts, spec, storage, source);
  return out;
}

}  // namespace

DeepseekV3Weights shard_deepseek_v3_weights(const DeepseekV3Weights& full, const ModelConfig& config,
                                            const ShardSpec& spec, std::deque<std::vector<uint8_t>>& storage,
                     const Checkpoint* source) {
  MLA_CHECK(spec.size >= 1 && spec.rank >= 0 && spec.rank < spec.size, "rank {} outside a world of {}", spec.rank, spec.size);
  if (spec.size == 1) return full;
  const Range heads = heads_of_rank(config.num_attention_heads, spec.size, spec.rank);
  MLA_CHECK(config.vocab_size >= spec.size, "vocab_size {} is smaller than the world size {}", config.vocab_size, spec.size);
  const int64_t slice = (config.vocab_size + spec.size - 1) / spec.size;
  const Range vocab{std::min(config.vocab_size, slice * spec.rank), std::min(config.vocab_size, slice * (spec.rank + 1))};
  DeepseekV3Weights out;
  out.norm = full.norm;
  if (vocab.size() > 0) {
    out.embed_tokens = full.embed_tokens.rows_view(vocab.begin, vocab.end);
    out.lm_head = full.lm_head.rows_view(vocab.begin, vocab.end);
  }
  for (const auto& layer : full.layers) {
    DecoderLayerWeights sharded = layer;
    sharded.self_attn = shard_mla(layer.self_attn, config, heads, storage, source);
    if (layer.mlp) sharded.mlp = shard_mlp(*layer.mlp, spec, storage, source);
    if (layer.moe) sharded.moe = shard_moe(*layer.moe, spec, storage, source);
    out.layers.push_back(std::move(sharded));
  }
  return out;
}

}  // namespace mlaserve
