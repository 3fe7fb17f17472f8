#include "model/deepseek_v3.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "base/error.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "model/dump.h"
#include "model/shard_layers.h"

namespace mlaserve {

DeepseekV3Model::DeepseekV3Model(std::shared_ptr<ModelStorage> storage, DeepseekV3Weights weights)
    : storage_(std::move(storage)),
      config_(storage_->config),
      weights_(std::move(weights)),
      rope_(config_.qk_rope_head_dim, config_.rope_theta, config_.rope_scaling),
      mla_shape_(mla_shape_of(config_)),
      router_(router_params(config_)),
      vocab_(VocabSlice::whole(config_.vocab_size)) {}

std::unique_ptr<DeepseekV3Model> DeepseekV3Model::load(const std::string& model_dir, ActivationQuant activation_quant) {
  auto storage = std::make_shared<ModelStorage>(model_dir, load_model_config(model_dir), activation_quant);
  DeepseekV3Weights weights = load_deepseek_v3_weights(storage->checkpoint, storage->config, storage->loader);
  auto model = std::unique_ptr<DeepseekV3Model>(new DeepseekV3Model(std::move(storage), std::move(weights)));
  spdlog::info("loaded {} from '{}': {} layers, {:.2f} GB of weights", model->config_.model_type, model_dir,
               model->config_.num_hidden_layers, double(model->weight_bytes()) / 1e9);
  return model;
}

std::unique_ptr<CausalLM> DeepseekV3Model::shard(const ShardSpec& spec, Communicator* comm) const {
  const auto start = std::chrono::steady_clock::now();
  WeightCopies copies(spec.numa_nodes);
  DeepseekV3Weights weights = shard_deepseek_v3_weights(weights_, config_, spec, copies, &storage_->checkpoint);
  log_shard_copies(spec, copies, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  auto shard = std::unique_ptr<DeepseekV3Model>(new DeepseekV3Model(storage_, std::move(weights)));
  shard->shard_copies_ = std::move(copies);
  shard->mla_shape_.n_heads = config_.num_attention_heads / spec.size;
  shard->comm_ = spec.size > 1 ? comm : nullptr;
  shard->vocab_ = VocabSlice::of_rank(config_.vocab_size, spec.size, spec.rank);
  if (spec.lock_weights) lock_weights(*shard);
  return shard;
}

void DeepseekV3Model::for_each_weight(const std::function<void(const LinearWeight&)>& visit) const {
  visit(weights_.embed_tokens);
  for (const auto& layer : weights_.layers) {
    visit_mla(layer.self_attn, visit);
    if (layer.mlp) visit_mlp(*layer.mlp, visit);
    if (layer.moe) {
      visit(layer.moe->gate);
      for (const auto& expert : layer.moe->experts) visit_mlp(expert, visit);
      if (layer.moe->shared_experts) visit_mlp(*layer.moe->shared_experts, visit);
    }
  }
  if (!config_.tie_word_embeddings) visit(weights_.lm_head);
}

double DeepseekV3Model::routed_expert_bytes() const {
  double routed = 0;
  for (const auto& layer : weights_.layers)
    if (layer.moe)
      for (const auto& expert : layer.moe->experts) routed += double(expert.bytes());
  return routed;
}

double DeepseekV3Model::active_weight_bytes_per_token() const {
  return active_weight_bytes(double(weight_bytes()), double(weights_.embed_tokens.bytes()), routed_expert_bytes(),
                             config_);
}

void DeepseekV3Model::forward(std::span<const ForwardSequence> batch, float* logits,
                              const HiddenStates* hidden_states) const {
  const int64_t hidden = config_.hidden_size;
  thread_local BatchLayout layout;
  layout_batch(batch, layout);
  const int64_t n_tokens = layout.n_tokens;
  const std::vector<MlaSequence>& sequences = layout.sequences;
  const std::vector<int64_t>& logit_tokens = layout.logit_tokens;
  thread_local std::vector<float> residual, normed, mixed;  // reused from step to step
  residual.resize(size_t(n_tokens * hidden));               // [n_tokens, hidden]
  normed.resize(residual.size());
  mixed.resize(residual.size());
  embed_vocab_slice(weights_.embed_tokens, vocab_, config_.vocab_size, hidden, batch, residual.data(), comm_);
  const ActivationDump dump = ActivationDump::begin_forward(!comm_ || comm_->rank() == 0);
  dump.write("embed", -1, residual.data(), n_tokens, hidden);
  // Sharded: each rank adds its heads' / columns' / experts' partial sums; one all-reduce after
  // attention and one after the FFN make every rank's residual stream whole again.
  auto reduce = [&](std::vector<float>& partial) {
    if (comm_) comm_->all_reduce_sum(partial.data(), int64_t(partial.size()));
  };
  // Each residual add is fused with the norm that reads its result (the next sublayer's input).
  const double eps = config_.rms_norm_eps;
  rms_norm(residual.data(), hidden, weights_.layers[0].input_layernorm, n_tokens, hidden, eps, normed.data(), hidden);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const DecoderLayerWeights& layer = weights_.layers[i];
    mla_forward(mla_shape_, layer.self_attn, rope_, MlaInput{normed.data(), n_tokens, sequences, i}, mixed.data());
    reduce(mixed);
    dump.write("attn_out", i, mixed.data(), n_tokens, hidden);
    add_rms_norm(residual.data(), mixed.data(), layer.post_attention_layernorm, n_tokens, hidden, eps, normed.data());
    if (layer.moe)
      moe_forward(router_, *layer.moe, normed.data(), n_tokens, mixed.data());
    else
      mlp_forward(*layer.mlp, normed.data(), n_tokens, mixed.data());
    reduce(mixed);
    dump.write("ffn_out", i, mixed.data(), n_tokens, hidden);
    if (i + 1 < config_.num_hidden_layers) {
      add_rms_norm(residual.data(), mixed.data(), weights_.layers[i + 1].input_layernorm, n_tokens, hidden, eps,
                   normed.data());
    } else {
      for (size_t j = 0; j < residual.size(); ++j) residual[j] += mixed[j];
    }
    dump.write("layer_out", i, residual.data(), n_tokens, hidden);
    if (hidden_states) capture_layer_states(*hidden_states, int(i), residual.data(), n_tokens, hidden);
  }
  const int64_t n_out = int64_t(logit_tokens.size());
  for (int64_t r = 0; r < n_out; ++r)
    rms_norm(residual.data() + logit_tokens[r] * hidden, hidden, weights_.norm, 1, hidden, eps,
             normed.data() + r * hidden, hidden);
  dump.write("final_norm", -1, normed.data(), n_out, hidden);
  if (hidden_states) capture_final_norm(*hidden_states, residual.data(), weights_.norm, eps, n_tokens, hidden);
  project_vocab_slice(weights_.lm_head, vocab_, config_.vocab_size, normed.data(), n_out, logits, comm_);
}

}  // namespace mlaserve
