// Block draft models: DFlash (z-lab's DFlashDraftModel checkpoint layout) and DSpark, which is
// DFlash plus a Markov head. Qwen3-style decoder layers (GQA with per-head q_norm / k_norm,
// rotate-half RoPE, SwiGLU MLP) draft a whole block in one forward:
// - the queries are the block: the last committed token, then mask_token_id x (block_size - 1),
//   embedded by the target's embedding, at positions p .. p + block_size - 1;
// - the keys and values are the context, then the block itself, with no mask (attention within
//   the block is bidirectional). The context row of position j < p is the target's hidden states
//   at target_layer_ids for token j, concatenated, through fc and hidden_norm, then each layer's
//   k_proj (k_norm, RoPE at j) and v_proj; it is kept in a paged cache, one row a layer;
// - the last layer's normed states go through the target's LM head (or the draft's own, where
//   the checkpoint has one): block position i > 0 predicts the token at p + i.
// A Markov head (markov_w1, markov_w2: [vocab, rank]) adds markov_w2 . markov_w1[previous token]
// to each position's logits, so the block is drafted left to right.
#pragma once
#include <memory>
#include <span>

#include "model/causal_lm.h"
#include "model/moe.h"

namespace mlaserve {

struct BlockDraftLayerWeights {
  const float* input_layernorm = nullptr;
  const float* post_attention_layernorm = nullptr;
  LinearWeight q_proj, k_proj, v_proj, o_proj;
  const float* q_norm = nullptr;  // [head_dim], every head alike
  const float* k_norm = nullptr;
  MlpWeights mlp;
};

// One sequence's context rows to write: positions [start, start + count) of its cache.
struct ContextRows {
  LatentCacheView cache;
  int64_t start = 0, count = 0;
};

// One block to draft: its sequence's cache holds context rows [0, context); the block sits at
// positions context .. context + block_size - 1.
struct DraftBlock {
  LatentCacheView cache;
  int64_t context = 0;
};

class BlockDraftModel {
 public:
  // Loads DIR's config.json and model.safetensors for drafting for `target`, whose embedding
  // (and LM head, unless the checkpoint has its own) it uses; `target` must outlive it. Throws
  // Error when the target's vocabulary, layers or width do not fit the draft, or a tensor is
  // missing, misshapen or unexpected.
  BlockDraftModel(const std::string& model_dir, const CausalLM& target);

  const BlockDraftConfig& config() const { return config_; }
  int64_t context_row_width() const { return 2 * config_.num_key_value_heads * config_.head_dim; }  // key, value
  int64_t feature_width() const { return fc_.cols; }  // target_layer_ids x the target's hidden size
  bool has_markov_head() const { return markov_w1_.data != nullptr; }

  // features: [sum of counts, feature_width], the rows' target states in order.
  void write_context(std::span<const ContextRows> rows, const float* features) const;
  // The blocks' last normed states [blocks x block_size, hidden], from their first tokens
  // (every other block position is the mask token).
  void forward(std::span<const DraftBlock> blocks, std::span<const int32_t> first_tokens, float* states) const;
  // logits [n, vocab] of n states.
  void logits(const float* states, int64_t n, float* logits) const;
  // logits[vocab] += markov_w2 . markov_w1[previous] (requires has_markov_head()).
  void add_markov_logits(int32_t previous, float* logits) const;

 private:
  void attention(const BlockDraftLayerWeights& layer, int64_t index, std::span<const DraftBlock> blocks,
                 const float* normed, float* out) const;

  BlockDraftConfig config_;
  Checkpoint checkpoint_;
  ModelConfig loader_config_;  // a plain (unquantized) checkpoint for the loader
  WeightLoader loader_;
  WeightCopies copies_;  // the layers' BF16 weights in the CPU kernels' panels
  LinearWeight fc_, embed_tokens_, lm_head_, markov_w1_, markov_w2_;
  const float* hidden_norm_ = nullptr;
  const float* norm_ = nullptr;
  std::vector<BlockDraftLayerWeights> layers_;
  RotaryEmbedding rope_;
};

}  // namespace mlaserve
