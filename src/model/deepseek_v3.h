// DeepseekV3ForCausalLM (DeepSeek-V3, Kimi K2): MLA attention, a dense MLP for the first
// first_k_dense_replace layers, routed MoE with shared experts after. HF semantics exactly;
// activations and accumulations in fp32.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/latent_cache_view.h"
#include "kernels/rope.h"
#include "model/causal_lm.h"
#include "model/mla.h"
#include "model/moe.h"
#include "model/vocab_parallel.h"
#include "parallel/communicator.h"

namespace mlaserve {

struct DecoderLayerWeights {
  const float* input_layernorm = nullptr;           // [hidden]
  const float* post_attention_layernorm = nullptr;  // [hidden]
  MlaWeights self_attn;
  std::optional<MlpWeights> mlp;  // dense layers (layer < first_k_dense_replace)
  std::optional<MoeWeights> moe;  // MoE layers
};

// DeepSeek-V3's multi-token-prediction (MTP) module, stored as layer num_hidden_layers: from
// the embedding of token i + 1 and the model's final normed hidden state at i, one decoder
// layer predicts token i + 2 (the model's embedding and head are shared).
struct NextTokenWeights {
  const float* enorm = nullptr;  // [hidden], for the embedding
  const float* hnorm = nullptr;  // [hidden], for the hidden state
  LinearWeight eh_proj;          // [hidden, 2 x hidden]: the two normed inputs concatenated
  DecoderLayerWeights layer;
  const float* shared_head_norm = nullptr;  // [hidden]
};

struct DeepseekV3Weights {
  LinearWeight embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  const float* norm = nullptr;                 // [hidden]
  LinearWeight lm_head;                        // [vocab, hidden]; embed_tokens when tie_word_embeddings
  std::optional<NextTokenWeights> next_token;  // the first MTP layer, where the checkpoint has one
};

// Loads and validates every tensor against the config; extra, missing, mis-shaped or
// wrongly typed tensors are errors naming the tensor. The loader keeps converted buffers.
DeepseekV3Weights load_deepseek_v3_weights(Checkpoint& checkpoint, const ModelConfig& config, WeightLoader& loader);

// This rank's slices of every weight: views into the same mapped checkpoint, except column
// slices, which are copied into `storage` (see compact_columns; `source` is the mapped
// checkpoint whose pages the copies replace).
DeepseekV3Weights shard_deepseek_v3_weights(const DeepseekV3Weights& full, const ModelConfig& config,
                                            const ShardSpec& spec, WeightCopies& storage, const Checkpoint* source);

class DeepseekV3Model : public CausalLM {
 public:
  // Reads DIR/config.json and the safetensors checkpoint (memory-mapped).
  static std::unique_ptr<DeepseekV3Model> load(const std::string& model_dir, ActivationQuant activation_quant);
  std::unique_ptr<CausalLM> shard(const ShardSpec& spec, Communicator* comm) const override;

  const ModelConfig& config() const override { return config_; }
  void for_each_weight(const std::function<void(const LinearWeight&)>& visit) const override;
  // Everything but the embedding table and the routed experts, plus num_experts_per_tok
  // average experts per MoE layer, plus one embedding row.
  double routed_expert_bytes() const override;
  double active_weight_bytes_per_token() const override;
  void forward(std::span<const ForwardSequence> batch, float* logits,
               const HiddenStates* hidden = nullptr) const override;
  const LinearWeight& embed_tokens() const override { return weights_.embed_tokens; }
  const LinearWeight& lm_head() const override { return weights_.lm_head; }
  const DeepseekV3Weights& weights() const { return weights_; }
  const std::shared_ptr<ModelStorage>& storage() const { return storage_; }
  using CausalLM::forward;

 private:
  DeepseekV3Model(std::shared_ptr<ModelStorage> storage, DeepseekV3Weights weights);

  std::shared_ptr<ModelStorage> storage_;
  WeightCopies shard_copies_;  // a shard's compacted column slices
  ModelConfig config_;
  DeepseekV3Weights weights_;
  RotaryEmbedding rope_;
  MlaShape mla_shape_;
  RouterParams router_;
  Communicator* comm_ = nullptr;  // null: a single rank
  VocabSlice vocab_;              // this rank's rows of embed_tokens and lm_head
};

}  // namespace mlaserve
