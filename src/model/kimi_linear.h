// KimiLinearForCausalLM (Kimi Linear 48B-A3B): layers in linear_attn_config.full_attn_layers
// run MLA without rotary embedding (mla_use_nope), every other layer Kimi Delta Attention;
// a dense MLP for the first first_k_dense_replace layers, sigmoid-routed MoE with shared
// experts after (block_sparse_moe, experts w1/w3/w2). HF semantics, fp32 activations.
// Each sequence carries its KDA state beside its latent cache (LatentCacheView::state).
#pragma once
#include <deque>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "io/safetensors.h"
#include "kernels/rope.h"
#include "model/causal_lm.h"
#include "model/kda.h"
#include "model/moe.h"

namespace mlaserve {

struct KimiLinearLayerWeights {
  const float* input_layernorm = nullptr;
  const float* post_attention_layernorm = nullptr;
  std::variant<MlaWeights, KdaWeights> self_attn;
  std::optional<MlpWeights> mlp;
  std::optional<MoeWeights> moe;
};

struct KimiLinearWeights {
  LinearWeight embed_tokens;
  std::vector<KimiLinearLayerWeights> layers;
  const float* norm = nullptr;
  LinearWeight lm_head;
};

class KimiLinearModel : public CausalLM {
 public:
  static std::unique_ptr<KimiLinearModel> load(const std::string& model_dir);

  const ModelConfig& config() const override { return config_; }
  size_t weight_bytes() const override;
  double active_weight_bytes_per_token() const override;
  void forward(std::span<const ForwardSequence> batch, float* logits) const override;
  using CausalLM::forward;
  // Not yet: KDA heads would split like MLA heads; refused with a clear error.
  std::unique_ptr<CausalLM> shard(const ShardSpec& spec, Communicator* comm) const override;

 private:
  struct Storage {
    Storage(const std::string& model_dir, const ModelConfig& config);
    ModelConfig config;
    Checkpoint checkpoint;
    WeightLoader loader;
  };
  KimiLinearModel(std::shared_ptr<Storage> storage, KimiLinearWeights weights);
  void mix(int64_t layer, const float* normed, int64_t n_tokens, std::span<const ForwardSequence> batch,
           std::span<const MlaSequence> mla_sequences, float* out) const;

  std::shared_ptr<Storage> storage_;
  ModelConfig config_;
  KimiLinearWeights weights_;
  RotaryEmbedding rope_;  // never applied (mla_use_nope); MLA's interface takes one
  MlaShape mla_shape_;
  KdaShape kda_shape_;
  RouterParams router_;
  std::vector<int64_t> ordinal_;  // per layer: its index among the MLA layers or among the KDA layers
};

}  // namespace mlaserve
