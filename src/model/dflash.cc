#include "model/dflash.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/dequantize.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

// The layer's linear weights from the checkpoint, BF16 ones repacked into `copies`.
BlockDraftLayerWeights load_layer(WeightLoader& loader, WeightCopies& copies, const BlockDraftConfig& config,
                                  int64_t index) {
  const std::string prefix = fmt::format("layers.{}", index);
  const int64_t hidden = config.hidden_size, d = config.head_dim;
  BlockDraftLayerWeights layer;
  layer.input_layernorm = loader.vector(prefix + ".input_layernorm.weight", hidden);
  layer.post_attention_layernorm = loader.vector(prefix + ".post_attention_layernorm.weight", hidden);
  layer.q_proj = loader.linear(prefix + ".self_attn.q_proj", config.num_attention_heads * d, hidden);
  layer.k_proj = loader.linear(prefix + ".self_attn.k_proj", config.num_key_value_heads * d, hidden);
  layer.v_proj = loader.linear(prefix + ".self_attn.v_proj", config.num_key_value_heads * d, hidden);
  layer.o_proj = loader.linear(prefix + ".self_attn.o_proj", hidden, config.num_attention_heads * d);
  layer.q_norm = loader.vector(prefix + ".self_attn.q_norm.weight", d);
  layer.k_norm = loader.vector(prefix + ".self_attn.k_norm.weight", d);
  layer.mlp = load_mlp_weights(loader, prefix + ".mlp", hidden, config.intermediate_size);
  for (LinearWeight* weight : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.mlp.gate_proj,
                               &layer.mlp.up_proj, &layer.mlp.down_proj})
    *weight = repack_bf16_panels(*weight, copies);
  return layer;
}

}  // namespace

BlockDraftModel::BlockDraftModel(const std::string& model_dir, const CausalLM& target)
    : config_(load_block_draft_config(model_dir)),
      checkpoint_(model_dir),
      loader_(checkpoint_, loader_config_),
      rope_(config_.head_dim, config_.rope_theta, std::nullopt, RotaryPairing::Halves) {
  const ModelConfig& target_config = target.config();
  MLA_CHECK(config_.vocab_size == target_config.vocab_size,
            "the block draft's vocabulary ({}) is not the target's ({})", config_.vocab_size, target_config.vocab_size);
  for (const int layer : config_.target_layer_ids)
    MLA_CHECK(layer < target_config.num_hidden_layers, "the block draft reads target layer {}, but the target has {}",
              layer, target_config.num_hidden_layers);
  const int64_t hidden = config_.hidden_size,
                features = int64_t(config_.target_layer_ids.size()) * target_config.hidden_size;
  MLA_CHECK(hidden == target_config.hidden_size, "the block draft's hidden_size {} is not the target's {}", hidden,
            target_config.hidden_size);
  fc_ = repack_bf16_panels(loader_.linear("fc", hidden, features), copies_);
  hidden_norm_ = loader_.vector("hidden_norm.weight", hidden);
  norm_ = loader_.vector("norm.weight", hidden);
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) layers_.push_back(load_layer(loader_, copies_, config_, i));
  embed_tokens_ = checkpoint_.contains("embed_tokens.weight")
                      ? loader_.dense("embed_tokens.weight", config_.vocab_size, hidden)
                      : target.embed_tokens();
  lm_head_ = checkpoint_.contains("lm_head.weight")
                 ? repack_bf16_panels(loader_.linear("lm_head", config_.vocab_size, hidden), copies_)
                 : target.lm_head();
  if (checkpoint_.contains("markov_w1")) {
    const auto& shape = checkpoint_.get("markov_w1").shape;
    MLA_CHECK(shape.size() == 2, "the block draft's markov_w1 must be [vocab, rank], got {} dimensions", shape.size());
    const int64_t rank = shape[1];
    markov_w1_ = loader_.dense("markov_w1", config_.vocab_size, rank);
    markov_w2_ = repack_bf16_panels(loader_.dense("markov_w2", config_.vocab_size, rank), copies_);
  }
  for (const auto& name : checkpoint_.unused_names())  // a DSpark confidence head drafts nothing
    MLA_CHECK(name.starts_with("confidence"), "unexpected tensor '{}' (shape {}) in the block draft {}", name,
              checkpoint_.all().at(name)->shape_string(), model_dir);
}

void BlockDraftModel::write_context(std::span<const ContextRows> rows, const float* features) const {
  int64_t n = 0;
  for (const ContextRows& r : rows) n += r.count;
  if (n == 0) return;
  const int64_t hidden = config_.hidden_size, d = config_.head_dim, kv = config_.num_key_value_heads;
  thread_local std::vector<float> context, keys, values, row;
  context.resize(size_t(n * hidden));
  keys.resize(size_t(n * kv * d));
  values.resize(keys.size());
  row.resize(size_t(context_row_width()));
  linear(fc_, features, n, context.data());
  rms_norm(context.data(), hidden, hidden_norm_, n, hidden, config_.rms_norm_eps, context.data(), hidden);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const BlockDraftLayerWeights& layer = layers_[l];
    linear(layer.k_proj, context.data(), n, keys.data());
    linear(layer.v_proj, context.data(), n, values.data());
    rms_norm(keys.data(), d, layer.k_norm, n * kv, d, config_.rms_norm_eps, keys.data(), d);
    int64_t t = 0;
    for (const ContextRows& r : rows) {
      for (int64_t j = 0; j < r.count; ++j, ++t) {
        rope_.apply(keys.data() + t * kv * d, r.start + j, kv, d);
        std::copy_n(keys.data() + t * kv * d, kv * d, row.data());
        std::copy_n(values.data() + t * kv * d, kv * d, row.data() + kv * d);
        r.cache.store(int64_t(l), r.start + j, row.data());
      }
    }
  }
}

// Each block's queries against its context rows (from the cache) and its own keys and values,
// one task per (block, key-value head).
void BlockDraftModel::attention(const BlockDraftLayerWeights& layer, int64_t index, std::span<const DraftBlock> blocks,
                                const float* normed, float* out) const {
  const int64_t B = config_.block_size, heads = config_.num_attention_heads, kv = config_.num_key_value_heads;
  const int64_t d = config_.head_dim, n = int64_t(blocks.size()) * B, group = heads / kv;
  const double eps = config_.rms_norm_eps;
  thread_local std::vector<float> q, k, v, mixed;
  q.resize(size_t(n * heads * d));
  k.resize(size_t(n * kv * d));
  v.resize(k.size());
  mixed.resize(q.size());
  linear(layer.q_proj, normed, n, q.data());
  linear(layer.k_proj, normed, n, k.data());
  linear(layer.v_proj, normed, n, v.data());
  rms_norm(q.data(), d, layer.q_norm, n * heads, d, eps, q.data(), d);
  rms_norm(k.data(), d, layer.k_norm, n * kv, d, eps, k.data(), d);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t position = blocks[size_t(t / B)].context + t % B;
    rope_.apply(q.data() + t * heads * d, position, heads, d);
    rope_.apply(k.data() + t * kv * d, position, kv, d);
  }
  const float scale = float(1.0 / std::sqrt(double(d)));
  // The workers see this thread's buffers through pointers (thread_local names their own).
  const float *queries = q.data(), *block_keys = k.data(), *block_values = v.data();
  float* results = mixed.data();
  thread_pool().parallel_for(int64_t(blocks.size()) * kv, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> keys, values, scores;  // the worker's own
    for (int64_t task = begin; task < end; ++task) {
      const DraftBlock& block = blocks[size_t(task / kv)];
      const int64_t g = task % kv, first = task / kv * B, n_keys = block.context + B;
      keys.resize(size_t(n_keys * d));
      values.resize(keys.size());
      scores.resize(size_t(n_keys));
      for (int64_t j = 0; j < block.context; ++j) {
        block.cache.load(index, j, g * d, d, keys.data() + j * d);
        block.cache.load(index, j, (kv + g) * d, d, values.data() + j * d);
      }
      for (int64_t t = 0; t < B; ++t) {
        std::copy_n(block_keys + ((first + t) * kv + g) * d, d, keys.data() + (block.context + t) * d);
        std::copy_n(block_values + ((first + t) * kv + g) * d, d, values.data() + (block.context + t) * d);
      }
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t t = 0; t < B; ++t) {
          const float* query = queries + ((first + t) * heads + h) * d;
          for (int64_t j = 0; j < n_keys; ++j) scores[size_t(j)] = simd::dot_f32(query, keys.data() + j * d, d) * scale;
          softmax_in_place(scores.data(), n_keys);
          float* result = results + ((first + t) * heads + h) * d;
          std::fill(result, result + d, 0.0f);
          for (int64_t j = 0; j < n_keys; ++j) simd::axpy(scores[size_t(j)], values.data() + j * d, result, d);
        }
    }
  });
  linear(layer.o_proj, mixed.data(), n, out);
}

void BlockDraftModel::forward(std::span<const DraftBlock> blocks, std::span<const int32_t> first_tokens,
                              float* states) const {
  MLA_CHECK(first_tokens.size() == blocks.size(), "internal: {} first tokens for {} blocks", first_tokens.size(),
            blocks.size());
  const int64_t B = config_.block_size, hidden = config_.hidden_size, n = int64_t(blocks.size()) * B;
  const double eps = config_.rms_norm_eps;
  thread_local std::vector<float> residual, normed, mixed;
  residual.resize(size_t(n * hidden));
  normed.resize(residual.size());
  mixed.resize(residual.size());
  for (int64_t t = 0; t < n; ++t)
    dequantize_row(embed_tokens_, t % B == 0 ? first_tokens[size_t(t / B)] : config_.mask_token_id,
                   residual.data() + t * hidden);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const BlockDraftLayerWeights& layer = layers_[l];
    rms_norm(residual.data(), hidden, layer.input_layernorm, n, hidden, eps, normed.data(), hidden);
    attention(layer, int64_t(l), blocks, normed.data(), mixed.data());
    add_rms_norm(residual.data(), mixed.data(), layer.post_attention_layernorm, n, hidden, eps, normed.data());
    mlp_forward(layer.mlp, normed.data(), n, mixed.data());
    for (size_t i = 0; i < residual.size(); ++i) residual[i] += mixed[i];
  }
  rms_norm(residual.data(), hidden, norm_, n, hidden, eps, states, hidden);
}

void BlockDraftModel::logits(const float* states, int64_t n, float* logits) const {
  if (n > 0) linear(lm_head_, states, n, logits);
}

void BlockDraftModel::add_markov_logits(int32_t previous, float* logits) const {
  MLA_CHECK(has_markov_head(), "internal: the block draft has no Markov head");
  thread_local std::vector<float> low_rank, markov;
  low_rank.resize(size_t(markov_w1_.cols));
  markov.resize(size_t(config_.vocab_size));
  dequantize_row(markov_w1_, previous, low_rank.data());
  linear(markov_w2_, low_rank.data(), 1, markov.data());
  for (int64_t i = 0; i < config_.vocab_size; ++i) logits[i] += markov[size_t(i)];
}

}  // namespace mlaserve
