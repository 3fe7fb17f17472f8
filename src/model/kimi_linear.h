// KimiLinearForCausalLM (Kimi Linear 48B-A3B): layers in linear_attn_config.full_attn_layers
// run MLA without rotary embedding (mla_use_nope), every other layer Kimi Delta Attention;
// a dense MLP for the first first_k_dense_replace layers, sigmoid-routed MoE with shared
// experts after (block_sparse_moe, experts w1/w3/w2). HF semantics, fp32 activations.
// Kimi K3 (model_type kimi_k3, the text model under "language_model.") adds the KDA gate with
// a lower bound and full-rank output gate, MLA's output gate, LatentMoE, SiTU and attention
// residuals.
// Each sequence carries its KDA state beside its latent cache (LatentCacheView::state).
#pragma once
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "io/safetensors.h"
#include "kernels/rope.h"
#include "model/causal_lm.h"
#include "model/kda.h"
#include "model/moe.h"
#include "model/vocab_parallel.h"

namespace mlaserve {

// Kimi K3's attention residuals: the query that mixes the residual bank before a sublayer.
struct AttnResWeights {
  const float* res_norm = nullptr;  // [hidden]
  const float* res_proj = nullptr;  // [1, hidden]
};

struct KimiLinearLayerWeights {
  std::optional<AttnResWeights> attention_res, mlp_res;  // K3: self_attention_res_*, mlp_res_*
  const float* input_layernorm = nullptr;
  const float* post_attention_layernorm = nullptr;
  std::variant<MlaWeights, KdaWeights> self_attn;
  std::optional<MlpWeights> mlp;
  std::optional<MoeWeights> moe;
};

struct KimiLinearWeights {
  LinearWeight embed_tokens;
  std::vector<KimiLinearLayerWeights> layers;
  std::optional<AttnResWeights> output_attn_res;  // K3: model.output_attn_res_*, before the final norm
  const float* norm = nullptr;
  LinearWeight lm_head;
};

class KimiLinearModel : public CausalLM {
 public:
  static std::unique_ptr<KimiLinearModel> load(const std::string& model_dir, ActivationQuant activation_quant);

  const ModelConfig& config() const override { return config_; }
  void for_each_weight(const std::function<void(const LinearWeight&)>& visit) const override;
  double routed_expert_bytes() const override;
  double active_weight_bytes_per_token() const override;
  void forward(std::span<const ForwardSequence> batch, float* logits,
               const HiddenStates* hidden = nullptr) const override;
  const LinearWeight& embed_tokens() const override { return weights_.embed_tokens; }
  const LinearWeight& lm_head() const override { return weights_.lm_head; }
  using CausalLM::forward;
  // KDA and MLA heads split alike (TP 8 of 96 heads: 12 each), MLP/MoE as for DeepSeek-V3;
  // embedding, LM head, norms, routers, LatentMoE projections and attention residuals are
  // replicated. One all-reduce after each mixer and each FFN (and the LatentMoE sum).
  std::unique_ptr<CausalLM> shard(const ShardSpec& spec, Communicator* comm) const override;

 private:
  KimiLinearModel(std::shared_ptr<ModelStorage> storage, KimiLinearWeights weights);
  // One forward pass's sequences, for the layer loops.
  struct Pass {
    std::span<const ForwardSequence> batch;
    std::span<const MlaSequence> sequences;
    int64_t n_tokens;
    const HiddenStates* hidden;  // what to hand a drafter (null: nothing)
  };
  void run_layers(const Pass& pass, std::vector<float>& residual) const;
  void run_layers_attn_res(const Pass& pass, std::vector<float>& residual) const;
  void feed_forward(int64_t layer, const float* normed, int64_t n_tokens, float* out) const;
  void mix(int64_t layer, const float* normed, int64_t n_tokens, std::span<const ForwardSequence> batch,
           std::span<const MlaSequence> mla_sequences, float* out) const;

  std::shared_ptr<ModelStorage> storage_;
  WeightCopies shard_copies_;  // a shard's compacted column slices
  ModelConfig config_;
  KimiLinearWeights weights_;
  Communicator* comm_ = nullptr;  // null: a single rank
  RotaryEmbedding rope_;          // never applied (mla_use_nope); MLA's interface takes one
  MlaShape mla_shape_;
  KdaShape kda_shape_;
  RouterParams router_;
  VocabSlice vocab_;              // this rank's rows of embed_tokens and lm_head
  std::vector<int64_t> ordinal_;  // per layer: its index among the MLA layers or among the KDA layers
};

}  // namespace mlaserve
