// DeepSeek-V3's multi-token-prediction module run as a drafter (as vLLM's and SGLang's
// DeepSeek MTP drafters do): a batch row at position j takes the model's final normed hidden
// state at j (or, chained, the module's own output state) and token j + 1, and predicts token
// j + 2 through the model's head. Its one MLA layer keeps a latent cache of its own (a
// LatentCacheView of one layer).
#pragma once
#include <memory>

#include "model/deepseek_v3.h"

namespace mlaserve {

class DeepseekMtp {
 public:
  // The module of a model with num_nextn_predict_layers > 0; `storage` keeps its weights alive.
  DeepseekMtp(std::shared_ptr<ModelStorage> storage, const NextTokenWeights& weights, LinearWeight embed_tokens,
              LinearWeight lm_head);

  const ModelConfig& config() const { return storage_->config; }
  // batch[i].tokens: tokens j + 1 of its rows j = start_position, ...; hidden: [n_tokens, hidden]
  // in batch order, the states at the rows' positions. Writes each row's latent into the
  // sequence's one-layer cache, its output state (shared_head.norm's) into states [n_tokens,
  // hidden], and logits [logit_rows(batch), vocab] for the rows that ask.
  void forward(std::span<const ForwardSequence> batch, const float* hidden, float* states, float* logits) const;

 private:
  std::shared_ptr<ModelStorage> storage_;
  NextTokenWeights weights_;
  LinearWeight embed_tokens_, lm_head_;
  RotaryEmbedding rope_;
  MlaShape mla_shape_;
  RouterParams router_;
};

// The MTP module of `model`; throws Error naming the reason when it has none (not a
// DeepSeek-V3-family model, or num_nextn_predict_layers is 0).
std::unique_ptr<DeepseekMtp> next_token_module(const CausalLM& model);

}  // namespace mlaserve
