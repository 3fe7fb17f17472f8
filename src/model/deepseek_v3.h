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
#include "model/mla.h"
#include "model/moe.h"
#include "parallel/communicator.h"

namespace mlaserve {

struct DecoderLayerWeights {
  const float* input_layernorm = nullptr;           // [hidden]
  const float* post_attention_layernorm = nullptr;  // [hidden]
  MlaWeights self_attn;
  std::optional<MlpWeights> mlp;  // dense layers (layer < first_k_dense_replace)
  std::optional<MoeWeights> moe;  // MoE layers
};

struct DeepseekV3Weights {
  LinearWeight embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  const float* norm = nullptr;  // [hidden]
  LinearWeight lm_head;         // [vocab, hidden]; embed_tokens when tie_word_embeddings
};

// Loads and validates every tensor against the config; extra, missing, mis-shaped or
// wrongly typed tensors are errors naming the tensor. The loader keeps converted buffers.
DeepseekV3Weights load_deepseek_v3_weights(Checkpoint& checkpoint, const ModelConfig& config,
                                           WeightLoader& loader);

// One sequence's part of a forward batch.
struct ForwardSequence {
  enum class Logits { None, Last, All };
  std::span<const int32_t> tokens;  // its new tokens
  int64_t start_position = 0;       // position of tokens[0]; the cache holds [0, start_position)
  LatentCacheView cache;
  MlaPath path = MlaPath::Auto;
  Logits logits = Logits::Last;     // a prefill chunk that does not end the prompt needs none
};

// Rows of logits a batch produces: All -> every token, Last -> 1, None -> 0, in batch order.
int64_t logit_rows(std::span<const ForwardSequence> batch);

// Which part of the model a rank holds: attention heads, dense/shared MLP and (without expert
// parallelism) routed-expert intermediate columns split `size` ways; with expert parallelism
// whole experts split `size` ways; embedding and LM head split by vocabulary.
struct ShardSpec {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
};

// This rank's slices of every weight (views into the same mapped checkpoint).
DeepseekV3Weights shard_deepseek_v3_weights(const DeepseekV3Weights& full, const ModelConfig& config,
                                            const ShardSpec& spec);

class DeepseekV3Model {
 public:
  // Reads DIR/config.json and the safetensors checkpoint (memory-mapped).
  static std::unique_ptr<DeepseekV3Model> load(const std::string& model_dir);
  // This rank's shard, sharing the mapped checkpoint; its forward runs the collectives on
  // `comm` (which must outlive it). Throws Error when the heads do not divide by the size.
  std::unique_ptr<DeepseekV3Model> shard(const ShardSpec& spec, Communicator* comm) const;

  const ModelConfig& config() const { return config_; }
  size_t weight_bytes() const;
  // Weight bytes one decoded token reads: everything but the embedding table and the routed
  // experts, plus num_experts_per_tok average experts per MoE layer, plus one embedding row.
  double active_weight_bytes_per_token() const;

  // Runs every sequence's new tokens in one pass: each linear layer reads its weights once
  // for the whole batch; attention is per sequence. logits: [logit_rows(batch), vocab].
  void forward(std::span<const ForwardSequence> batch, float* logits) const;

  // One sequence: logits [n, vocab] if all_logits, else [1, vocab] for the last token.
  void forward(std::span<const int32_t> tokens, int64_t start_position,
               const LatentCacheView& cache, bool all_logits, float* logits,
               MlaPath path = MlaPath::Auto) const;

 private:
  // The mapped checkpoint and the buffers the loader converted: shared by every shard.
  struct Storage {
    Storage(const std::string& model_dir, const ModelConfig& config);
    ModelConfig config;
    Checkpoint checkpoint;
    WeightLoader loader;
  };
  DeepseekV3Model(std::shared_ptr<Storage> storage, DeepseekV3Weights weights);
  void embed(std::span<const ForwardSequence> batch, float* residual) const;
  void project_logits(const float* normed, int64_t n_rows, float* logits) const;

  std::shared_ptr<Storage> storage_;
  ModelConfig config_;
  DeepseekV3Weights weights_;
  RotaryEmbedding rope_;
  MlaShape mla_shape_;
  RouterParams router_;
  Communicator* comm_ = nullptr;             // null: a single rank
  int64_t vocab_begin_ = 0, vocab_end_ = 0;  // this rank's rows of embed_tokens and lm_head
};

// A contiguous latent cache for one sequence (one block of `capacity` positions).
class SequenceCache {
 public:
  SequenceCache(const ModelConfig& config, int64_t capacity, CacheDType dtype = CacheDType::F32);
  const LatentCacheView& view() const { return view_; }

 private:
  std::vector<uint8_t> storage_;
  int32_t block_id_ = 0;
  LatentCacheView view_;
};

}  // namespace mlaserve
