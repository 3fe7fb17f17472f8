#include "model/kimi_linear.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/simd.h"
#include "model/shard_layers.h"

namespace mlaserve {
namespace {

KdaWeights load_kda(WeightLoader& loader, const ModelConfig& config, const std::string& prefix) {
  const KdaConfig& kda = *config.kda;
  const int64_t hidden = config.hidden_size, width = kda.num_heads * kda.head_dim, dim = kda.head_dim;
  const int64_t kernel = kda.short_conv_kernel_size;
  KdaWeights w;
  w.q_proj = loader.linear(prefix + ".q_proj", width, hidden);
  w.k_proj = loader.linear(prefix + ".k_proj", width, hidden);
  w.v_proj = loader.linear(prefix + ".v_proj", width, hidden);
  w.q_conv1d = loader.array(prefix + ".q_conv1d.weight", {width, 1, kernel});
  w.k_conv1d = loader.array(prefix + ".k_conv1d.weight", {width, 1, kernel});
  w.v_conv1d = loader.array(prefix + ".v_conv1d.weight", {width, 1, kernel});
  w.A_log = kda.gate_lower_bound ? loader.leading(prefix + ".A_log", kda.num_heads)
                                 : loader.array(prefix + ".A_log", {1, 1, kda.num_heads, 1});
  w.f_a_proj = loader.linear(prefix + ".f_a_proj", dim, hidden);
  w.f_b_proj = loader.linear(prefix + ".f_b_proj", width, dim);
  w.dt_bias = loader.vector(prefix + ".dt_bias", width);
  w.b_proj = loader.linear(prefix + ".b_proj", kda.num_heads, hidden);
  if (kda.use_full_rank_gate) {
    w.g_proj = loader.linear(prefix + ".g_proj", width, hidden);
  } else {
    w.g_a_proj = loader.linear(prefix + ".g_a_proj", dim, hidden);
    w.g_b_proj = loader.linear(prefix + ".g_b_proj", width, dim);
  }
  w.o_norm = loader.vector(prefix + ".o_norm.weight", dim);
  w.o_proj = loader.linear(prefix + ".o_proj", hidden, width);
  return w;
}

GluActivation activation_of(const ModelConfig& config) {
  return {config.situ, float(config.activation_situ_beta), float(config.activation_situ_linear_beta)};
}

MlpWeights load_mlp(WeightLoader& loader, const ModelConfig& config, const std::string& prefix, int64_t width) {
  MlpWeights mlp = load_mlp_weights(loader, prefix, config.hidden_size, width);
  mlp.activation = activation_of(config);
  return mlp;
}

// block_sparse_moe: router gate (+ e_score_correction_bias), experts.{e}.w1 (gate) / w3 (up) /
// w2 (down), shared_experts.{gate,up,down}_proj. K3 LatentMoE: the experts read and write
// routed_expert_hidden_size-wide vectors between its down and up projections.
MoeWeights load_block_sparse_moe(WeightLoader& loader, const ModelConfig& config, const std::string& prefix) {
  const int64_t hidden = config.hidden_size, width = config.moe_intermediate_size;
  const int64_t expert_io = config.routed_expert_hidden_size.value_or(hidden);
  MoeWeights moe;
  if (config.routed_expert_hidden_size) {
    LatentMoeWeights latent;
    latent.routed_expert_down_proj = loader.linear(prefix + ".routed_expert_down_proj", expert_io, hidden);
    if (config.latent_moe_use_norm)
      latent.routed_expert_norm = loader.vector(prefix + ".routed_expert_norm.weight", expert_io);
    latent.routed_expert_up_proj = loader.linear(prefix + ".routed_expert_up_proj", hidden, expert_io);
    latent.norm_eps = config.rms_norm_eps;
    moe.latent = latent;
  }
  moe.gate = loader.dense(prefix + ".gate.weight", config.n_routed_experts, hidden);
  moe.e_score_correction_bias = loader.vector(prefix + ".gate.e_score_correction_bias", config.n_routed_experts);
  for (int64_t e = 0; e < config.n_routed_experts; ++e) {
    const std::string expert = fmt::format("{}.experts.{}", prefix, e);
    moe.experts.push_back({loader.linear(expert + ".w1", width, expert_io),
                           loader.linear(expert + ".w3", width, expert_io),
                           loader.linear(expert + ".w2", expert_io, width), activation_of(config)});
  }
  if (config.n_shared_experts > 0)
    moe.shared_experts = load_mlp(loader, config, prefix + ".shared_experts", config.n_shared_experts * width);
  return moe;
}

AttnResWeights load_attn_res(WeightLoader& loader, const std::string& prefix, int64_t hidden) {
  return {loader.vector(prefix + "_res_norm.weight", hidden), loader.array(prefix + "_res_proj.weight", {1, hidden})};
}

KimiLinearWeights load_weights(Checkpoint& checkpoint, const ModelConfig& config, WeightLoader& loader) {
  const int64_t hidden = config.hidden_size;
  const std::string& root = config.weight_prefix;
  KimiLinearWeights weights;
  weights.embed_tokens = loader.dense(root + "model.embed_tokens.weight", config.vocab_size, hidden);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = fmt::format("{}model.layers.{}", root, i);
    KimiLinearLayerWeights layer;
    if (config.attn_res_block_size) {
      layer.attention_res = load_attn_res(loader, prefix + ".self_attention", hidden);
      layer.mlp_res = load_attn_res(loader, prefix + ".mlp", hidden);
    }
    layer.input_layernorm = loader.vector(prefix + ".input_layernorm.weight", hidden);
    layer.post_attention_layernorm = loader.vector(prefix + ".post_attention_layernorm.weight", hidden);
    if (config.kda->is_mla_layer[size_t(i)])
      layer.self_attn = load_mla_weights(loader, config, prefix + ".self_attn");
    else
      layer.self_attn = load_kda(loader, config, prefix + ".self_attn");
    if (config.is_moe_layer(i))
      layer.moe = load_block_sparse_moe(loader, config, prefix + ".block_sparse_moe");
    else
      layer.mlp = load_mlp(loader, config, prefix + ".mlp", config.intermediate_size);
    weights.layers.push_back(std::move(layer));
  }
  if (config.attn_res_block_size) weights.output_attn_res = load_attn_res(loader, root + "model.output_attn", hidden);
  weights.norm = loader.vector(root + "model.norm.weight", hidden);
  weights.lm_head =
      config.tie_word_embeddings ? weights.embed_tokens : loader.linear(root + "lm_head", config.vocab_size, hidden);
  // Kimi K3's vision tower and projector (outside "language_model.") are not run.
  for (const auto& name : checkpoint.unused_names())
    MLA_CHECK(name.ends_with("rotary_emb.inv_freq") || (!root.empty() && !name.starts_with(root)),
              "unexpected tensor '{}' (shape {}) not used by {}", name, checkpoint.all().at(name)->shape_string(),
              config.model_type);
  return weights;
}

}  // namespace

KimiLinearModel::KimiLinearModel(std::shared_ptr<ModelStorage> storage, KimiLinearWeights weights)
    : storage_(std::move(storage)),
      config_(storage_->config),
      weights_(std::move(weights)),
      rope_(config_.qk_rope_head_dim, config_.rope_theta, config_.rope_scaling),
      mla_shape_{config_.hidden_size,
                 config_.num_attention_heads,
                 config_.kv_lora_rank,
                 config_.qk_nope_head_dim,
                 config_.qk_rope_head_dim,
                 config_.v_head_dim,
                 1e-6,
                 float(config_.softmax_scale()),
                 !config_.mla_use_nope},
      kda_shape_{
          config_.hidden_size,
          config_.kda->num_heads,
          config_.kda->head_dim,
          config_.kda->short_conv_kernel_size,
          config_.rms_norm_eps,
          config_.kda->gate_lower_bound ? std::optional<float>(float(*config_.kda->gate_lower_bound)) : std::nullopt},
      router_(router_params(config_)),
      vocab_(VocabSlice::whole(config_.vocab_size)) {
  int64_t mla = 0, kda = 0;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i)
    ordinal_.push_back(config_.kda->is_mla_layer[size_t(i)] ? mla++ : kda++);
}

std::unique_ptr<KimiLinearModel> KimiLinearModel::load(const std::string& model_dir, ActivationQuant activation_quant) {
  auto storage = std::make_shared<ModelStorage>(model_dir, load_model_config(model_dir), activation_quant);
  KimiLinearWeights weights = load_weights(storage->checkpoint, storage->config, storage->loader);
  auto model = std::unique_ptr<KimiLinearModel>(new KimiLinearModel(std::move(storage), std::move(weights)));
  spdlog::info(
      "loaded {} from '{}': {} layers ({} KDA, {} MLA), {:.2f} GB of weights, {:.2f} MiB of KDA state per sequence",
      model->config_.model_type, model_dir, model->config_.num_hidden_layers, model->config_.kda->kda_layers(),
      model->config_.cache_layers(), double(model->weight_bytes()) / 1e9,
      double(model->config_.recurrent_state_bytes()) / double(1 << 20));
  return model;
}

std::unique_ptr<CausalLM> KimiLinearModel::shard(const ShardSpec& spec, Communicator* comm) const {
  MLA_CHECK(spec.size >= 1 && spec.rank >= 0 && spec.rank < spec.size, "rank {} outside a world of {}", spec.rank,
            spec.size);
  const Range mla_heads = heads_of_rank(config_.num_attention_heads, spec.size, spec.rank);
  const Range kda_heads = heads_of_rank(config_.kda->num_heads, spec.size, spec.rank);
  const auto start = std::chrono::steady_clock::now();
  WeightCopies copies(spec.numa_nodes);
  const ShardContext context{spec, copies, &storage_->checkpoint};
  KimiLinearWeights weights = weights_;
  for (size_t i = 0; i < weights.layers.size(); ++i) {
    auto& layer = weights.layers[i];
    if (auto* mla = std::get_if<MlaWeights>(&layer.self_attn))
      *mla = shard_mla_weights(*mla, config_, mla_heads, context);
    else
      layer.self_attn = shard_kda_weights(std::get<KdaWeights>(layer.self_attn), kda_shape_, kda_heads, context);
    if (layer.mlp) layer.mlp = shard_mlp_weights(*layer.mlp, context);
    if (layer.moe) layer.moe = shard_moe_weights(*layer.moe, context);
    log_shard_progress(spec, i + 1, weights.layers.size());
  }
  // Vocabulary-parallel embedding and LM head, as DeepSeek-V3's.
  MLA_CHECK(config_.vocab_size >= spec.size, "vocab_size {} is smaller than the world size {}", config_.vocab_size,
            spec.size);
  const VocabSlice vocab = VocabSlice::of_rank(config_.vocab_size, spec.size, spec.rank);
  weights.embed_tokens = vocab.size() > 0 ? weights_.embed_tokens.rows_view(vocab.begin, vocab.end) : LinearWeight{};
  weights.lm_head = vocab.size() > 0 ? weights_.lm_head.rows_view(vocab.begin, vocab.end) : LinearWeight{};
  if (vocab.size() > 0 && !config_.tie_word_embeddings) weights.lm_head = copied_if_asked(weights.lm_head, context);
  log_shard_copies(spec, copies, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  auto shard = std::unique_ptr<KimiLinearModel>(new KimiLinearModel(storage_, std::move(weights)));
  shard->shard_copies_ = std::move(copies);
  shard->mla_shape_.n_heads = mla_heads.size();
  shard->kda_shape_.n_heads = kda_heads.size();
  shard->comm_ = spec.size > 1 ? comm : nullptr;
  shard->vocab_ = vocab;
  if (spec.lock_weights) lock_weights(*shard);
  return shard;
}

void KimiLinearModel::for_each_weight(const std::function<void(const LinearWeight&)>& visit) const {
  visit(weights_.embed_tokens);
  if (!config_.tie_word_embeddings) visit(weights_.lm_head);
  for (const auto& layer : weights_.layers) {
    if (const auto* mla = std::get_if<MlaWeights>(&layer.self_attn)) {
      visit_mla(*mla, visit);
    } else {
      const auto& kda = std::get<KdaWeights>(layer.self_attn);
      for (const auto* w : {&kda.q_proj, &kda.k_proj, &kda.v_proj, &kda.f_a_proj, &kda.f_b_proj, &kda.b_proj,
                            &kda.g_a_proj, &kda.g_b_proj, &kda.o_proj})
        visit(*w);
      if (kda.g_proj) visit(*kda.g_proj);
    }
    if (layer.mlp) visit_mlp(*layer.mlp, visit);
    if (layer.moe) {
      visit(layer.moe->gate);
      if (const auto& latent = layer.moe->latent) {
        visit(latent->routed_expert_down_proj);
        visit(latent->routed_expert_up_proj);
      }
      for (const auto& expert : layer.moe->experts) visit_mlp(expert, visit);
      if (layer.moe->shared_experts) visit_mlp(*layer.moe->shared_experts, visit);
    }
  }
}

double KimiLinearModel::routed_expert_bytes() const {
  double routed = 0;
  for (const auto& layer : weights_.layers)
    if (layer.moe)
      for (const auto& expert : layer.moe->experts) routed += double(expert.bytes());
  return routed;
}

double KimiLinearModel::active_weight_bytes_per_token() const {
  return active_weight_bytes(double(weight_bytes()), double(weights_.embed_tokens.bytes()), routed_expert_bytes(),
                             config_);
}

void KimiLinearModel::mix(int64_t layer, const float* normed, int64_t n_tokens, std::span<const ForwardSequence> batch,
                          std::span<const MlaSequence> mla_sequences, float* out) const {
  const auto& attn = weights_.layers[size_t(layer)].self_attn;
  if (const auto* mla = std::get_if<MlaWeights>(&attn)) {
    mla_forward(mla_shape_, *mla, rope_, MlaInput{normed, n_tokens, mla_sequences, ordinal_[size_t(layer)]}, out);
  } else {
    thread_local std::vector<KdaSequence> sequences;  // reused from step to step
    sequences.clear();
    for (size_t s = 0; s < batch.size(); ++s)
      sequences.push_back({mla_sequences[s].token_offset, mla_sequences[s].n_tokens,
                           batch[s].cache.state() + ordinal_[size_t(layer)] * kda_shape_.state_floats()});
    kda_forward(kda_shape_, std::get<KdaWeights>(attn), normed, n_tokens, sequences, out);
  }
  if (comm_) comm_->all_reduce_sum(out, n_tokens * config_.hidden_size);
}

namespace {

// Kimi K3's attention residuals: per token, a softmax over the candidates c of
// <RMSNorm(c), res_norm * res_proj> (RMSNorm without weight, eps rms_norm_eps) mixes the
// candidates themselves. out: [n_tokens, hidden].
void attn_res_mix(const AttnResWeights& weights, const std::vector<const float*>& candidates, int64_t n_tokens,
                  int64_t hidden, double eps, float* out) {
  thread_local std::vector<float> query, scores;  // reused from step to step
  query.resize(static_cast<size_t>(hidden));
  scores.resize(candidates.size());
  for (int64_t d = 0; d < hidden; ++d) query[size_t(d)] = weights.res_norm[d] * weights.res_proj[d];
  for (int64_t t = 0; t < n_tokens; ++t) {
    float best = -INFINITY;
    for (size_t c = 0; c < candidates.size(); ++c) {
      const float* v = candidates[c] + t * hidden;
      double square = 0, dot = 0;
      for (int64_t d = 0; d < hidden; ++d) {
        square += double(v[d]) * v[d];
        dot += double(v[d]) * query[size_t(d)];
      }
      scores[c] = float(dot / std::sqrt(square / double(hidden) + eps));
      best = std::max(best, scores[c]);
    }
    float total = 0;
    for (float& score : scores) total += score = std::exp(score - best);
    float* mixed = out + t * hidden;
    std::fill(mixed, mixed + hidden, 0.0f);
    for (size_t c = 0; c < candidates.size(); ++c)
      simd::axpy(scores[c] / total, candidates[c] + t * hidden, mixed, hidden);
  }
}

}  // namespace

void KimiLinearModel::feed_forward(int64_t layer, const float* normed, int64_t n_tokens, float* out) const {
  const KimiLinearLayerWeights& weights = weights_.layers[size_t(layer)];
  if (weights.moe)
    moe_forward(router_, *weights.moe, normed, n_tokens, out, comm_);
  else
    mlp_forward(*weights.mlp, normed, n_tokens, out);
  if (comm_) comm_->all_reduce_sum(out, n_tokens * config_.hidden_size);
}

// The plain residual stream: h += mixer(norm(h)); h += ffn(norm(h)).
void KimiLinearModel::run_layers(const Pass& pass, std::vector<float>& residual) const {
  const int64_t hidden = config_.hidden_size, n = pass.n_tokens;
  thread_local std::vector<float> normed, out;  // reused from step to step
  normed.resize(residual.size());
  out.resize(residual.size());
  // Each residual add is fused with the norm that reads its result (the next sublayer's input).
  const double eps = config_.rms_norm_eps;
  rms_norm(residual.data(), hidden, weights_.layers[0].input_layernorm, n, hidden, eps, normed.data(), hidden);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const KimiLinearLayerWeights& layer = weights_.layers[size_t(i)];
    mix(i, normed.data(), n, pass.batch, pass.sequences, out.data());
    add_rms_norm(residual.data(), out.data(), layer.post_attention_layernorm, n, hidden, eps, normed.data());
    feed_forward(i, normed.data(), n, out.data());
    if (i + 1 < config_.num_hidden_layers) {
      add_rms_norm(residual.data(), out.data(), weights_.layers[size_t(i + 1)].input_layernorm, n, hidden, eps,
                   normed.data());
    } else {
      for (size_t j = 0; j < residual.size(); ++j) residual[j] += out[j];
    }
    if (pass.hidden) capture_layer_states(*pass.hidden, int(i), residual.data(), n, hidden);
  }
}

// Attention residuals (attn_res_block_size): each sublayer reads a mix of the bank (the
// embedding, then the sum of each completed block's sublayer outputs) and the current block's
// partial sum; the final norm reads one more mix. `residual` holds the embedding on entry and
// the final mix on return. The state handed over for layer i is the mix layer i + 1's mixer
// reads (the final mix after the last layer), as K3's DSpark drafter takes it.
void KimiLinearModel::run_layers_attn_res(const Pass& pass, std::vector<float>& residual) const {
  const int64_t hidden = config_.hidden_size, n = pass.n_tokens, block = *config_.attn_res_block_size;
  // Reused from step to step: the bank's first `banked` vectors are this step's.
  thread_local std::vector<std::vector<float>> bank;
  thread_local std::vector<float> partial, normed, out;
  thread_local std::vector<const float*> candidates;
  size_t banked = 0;
  auto add_to_bank = [&](const std::vector<float>& sum) {
    if (banked == bank.size()) bank.emplace_back();
    bank[banked++].assign(sum.begin(), sum.end());
  };
  add_to_bank(residual);
  partial.assign(residual.size(), 0.0f);
  normed.resize(residual.size());
  out.resize(residual.size());
  bool partial_started = false;
  auto mix_into_residual = [&](const AttnResWeights& weights) {
    candidates.clear();
    for (size_t b = 0; b < banked; ++b) candidates.push_back(bank[b].data());
    if (partial_started) candidates.push_back(partial.data());
    attn_res_mix(weights, candidates, n, hidden, config_.rms_norm_eps, residual.data());
  };
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    const KimiLinearLayerWeights& layer = weights_.layers[size_t(i)];
    mix_into_residual(*layer.attention_res);
    if (pass.hidden && i > 0) capture_layer_states(*pass.hidden, int(i - 1), residual.data(), n, hidden);
    rms_norm(residual.data(), hidden, layer.input_layernorm, n, hidden, config_.rms_norm_eps, normed.data(), hidden);
    mix(i, normed.data(), n, pass.batch, pass.sequences, out.data());
    for (size_t j = 0; j < partial.size(); ++j) partial[j] += out[j];
    partial_started = true;
    mix_into_residual(*layer.mlp_res);
    rms_norm(residual.data(), hidden, layer.post_attention_layernorm, n, hidden, config_.rms_norm_eps, normed.data(),
             hidden);
    feed_forward(i, normed.data(), n, out.data());
    for (size_t j = 0; j < partial.size(); ++j) partial[j] += out[j];
    if ((i + 1) % block == 0) {
      add_to_bank(partial);
      std::fill(partial.begin(), partial.end(), 0.0f);
      partial_started = false;
    }
  }
  mix_into_residual(*weights_.output_attn_res);
  if (pass.hidden) capture_layer_states(*pass.hidden, int(config_.num_hidden_layers - 1), residual.data(), n, hidden);
}

void KimiLinearModel::forward(std::span<const ForwardSequence> batch, float* logits,
                              const HiddenStates* hidden_states) const {
  const int64_t hidden = config_.hidden_size;
  thread_local BatchLayout layout;
  layout_batch(batch, layout);
  const int64_t n_tokens = layout.n_tokens;
  for (const auto& seq : batch) {
    MLA_CHECK(seq.cache.state(), "{} needs a recurrent state with each sequence's cache", config_.model_type);
    // A sequence computed from its first token starts from a zero state.
    if (seq.start_position == 0) std::memset(seq.cache.state(), 0, size_t(config_.recurrent_state_bytes()));
  }
  thread_local std::vector<float> residual, normed;  // reused from step to step
  residual.resize(size_t(n_tokens * hidden));
  embed_vocab_slice(weights_.embed_tokens, vocab_, config_.vocab_size, hidden, batch, residual.data(), comm_);
  const Pass pass{batch, layout.sequences, n_tokens, hidden_states};
  if (config_.attn_res_block_size)
    run_layers_attn_res(pass, residual);
  else
    run_layers(pass, residual);
  normed.resize(residual.size());
  const int64_t n_out = int64_t(layout.logit_tokens.size());
  for (int64_t r = 0; r < n_out; ++r)
    rms_norm(residual.data() + layout.logit_tokens[size_t(r)] * hidden, hidden, weights_.norm, 1, hidden,
             config_.rms_norm_eps, normed.data() + r * hidden, hidden);
  if (hidden_states)
    capture_final_norm(*hidden_states, residual.data(), weights_.norm, config_.rms_norm_eps, n_tokens, hidden);
  project_vocab_slice(weights_.lm_head, vocab_, config_.vocab_size, normed.data(), n_out, logits, comm_);
}

}  // namespace mlaserve
