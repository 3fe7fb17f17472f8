// What the engine, the parallel runners and the tools need of a causal language model,
// whatever its family: a batched forward over sequences that each own a latent cache, and a
// way to cut the model into one rank's shard. load_causal_lm picks the family from config.json.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/linear_weight.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/latent_cache_view.h"
#include "model/mla.h"
#include "parallel/communicator.h"

namespace mlaserve {

// One sequence's part of a forward batch.
struct ForwardSequence {
  enum class Logits { None, Last, All };
  std::span<const int32_t> tokens;  // its new tokens
  int64_t start_position = 0;       // position of tokens[0]; the cache holds [0, start_position)
  LatentCacheView cache;
  MlaPath path = MlaPath::Auto;
  Logits logits = Logits::Last;  // a prefill chunk that does not end the prompt needs none
};

// Rows of logits a batch produces: All -> every token, Last -> 1, None -> 0, in batch order.
int64_t logit_rows(std::span<const ForwardSequence> batch);

// Hidden states a forward hands a drafter: every token's states of `layers`, side by side, in
// batch order: data is [n_tokens, layers.size() x hidden]. Layer i >= 0 is the residual stream
// after decoder layer i (before the final norm, also for the last layer); kFinalNorm is the
// final normed state the LM head reads.
struct HiddenStates {
  static constexpr int kFinalNorm = -1;
  std::span<const int> layers;
  float* data = nullptr;
};
// A forward's hand-over: copies `states` [n_tokens, width] (decoder layer `layer`'s) into every
// slot of `hidden` that names the layer; the final norm's into those that name kFinalNorm.
void capture_layer_states(const HiddenStates& hidden, int layer, const float* states, int64_t n_tokens, int64_t width);
void capture_final_norm(const HiddenStates& hidden, const float* residual, const float* norm, double eps,
                        int64_t n_tokens, int64_t width);

// A batch laid out as one token matrix: each sequence's slice of it and the rows that need
// logits. layout_batch refills `layout` (a forward keeps one a thread, so its vectors keep
// their capacity from step to step); throws Error for an empty sequence or one that overruns
// its cache.
struct BatchLayout {
  std::vector<MlaSequence> sequences;
  std::vector<int64_t> logit_tokens;  // batch indices of the tokens that need logits
  int64_t n_tokens = 0;
};
void layout_batch(std::span<const ForwardSequence> batch, BatchLayout& layout);

// The mapped checkpoint and the buffers the loader converted: shared by a model's shards.
struct ModelStorage {
  ModelStorage(const std::string& model_dir, const ModelConfig& model_config, ActivationQuant activation_quant)
      : config(model_config), checkpoint(model_dir), loader(checkpoint, config, activation_quant) {}
  ModelConfig config;
  Checkpoint checkpoint;
  WeightLoader loader;
};

// Weight bytes one decoded token reads, from the whole model's bytes: minus the embedding table
// (one row is read) and the routed experts (num_experts_per_tok of them per MoE layer), plus the
// embedding again when it is also the LM head. routed_bytes: all routed experts of all layers.
double active_weight_bytes(double total_bytes, double embedding_bytes, double routed_bytes, const ModelConfig& config);

// Which part of the model a rank holds: attention heads, dense/shared MLP and (without expert
// parallelism) routed-expert intermediate columns split `size` ways; with expert parallelism
// whole experts split `size` ways; embedding and LM head split by vocabulary.
struct ShardSpec {
  int rank = 0;
  int size = 1;
  bool expert_parallel = false;
  // The rank's MLP, expert and attention projections and LM head (q_a / kv_a only at size 1)
  // copied out of the mapped checkpoint, their pages released: BF16 into the CPU kernels'
  // panel layout (repack_bf16_panels; a BF16 kv_b_proj also gives absorbed decode its own
  // panels), other formats as stored (copy_weight), onto huge pages. Also with size 1.
  bool copy_weights = false;
  // The rank's weights locked in RAM once sharded (lock_weights); also with size 1.
  bool lock_weights = false;
  // With copy_weights: BF16 projections and LM head quantized to INT4 groups of 32 as they are
  // copied (requantize_int4, `--requantize q4`); the embedding, routers, norms and kv_b_proj
  // (whose absorbed panels decode reads) stay.
  bool requantize_q4 = false;
  // The NUMA nodes the rank's copies are placed on (`--numa`, RankPlacement::nodes; empty:
  // wherever the copying threads first touch them).
  std::vector<int> numa_nodes;
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual const ModelConfig& config() const = 0;
  // Every linear weight (the embedding and LM head included, once when they are tied).
  virtual void for_each_weight(const std::function<void(const LinearWeight&)>& visit) const = 0;
  size_t weight_bytes() const;                     // of the weights for_each_weight visits
  virtual double routed_expert_bytes() const = 0;  // of every layer's routed experts (0 without MoE)
  // Weight bytes one decoded token reads (the active experts' share of the routed experts).
  virtual double active_weight_bytes_per_token() const = 0;

  // Runs every sequence's new tokens in one pass: each linear layer reads its weights once
  // for the whole batch; attention is per sequence. logits: [logit_rows(batch), vocab].
  // hidden (a drafter's input): the states it names, of every token.
  virtual void forward(std::span<const ForwardSequence> batch, float* logits,
                       const HiddenStates* hidden = nullptr) const = 0;
  // The token embedding and LM head [vocab, hidden], for drafters that share them (a shard
  // holds its vocabulary slice of each; drafters take the unsharded model's).
  virtual const LinearWeight& embed_tokens() const = 0;
  virtual const LinearWeight& lm_head() const = 0;

  // This rank's shard, sharing the mapped checkpoint; its forward runs the collectives on
  // `comm` (which must outlive it). Throws Error when the heads do not divide by the size.
  virtual std::unique_ptr<CausalLM> shard(const ShardSpec& spec, Communicator* comm) const = 0;

  // One sequence: logits [n, vocab] if all_logits, else [1, vocab] for the last token.
  void forward(std::span<const int32_t> tokens, int64_t start_position, const LatentCacheView& cache, bool all_logits,
               float* logits, MlaPath path = MlaPath::Auto) const;
};

// Locks the stored bytes of the model's weights in RAM (mlock: `--mlock`), so that memory
// pressure does not page them out. Where the system refuses (RLIMIT_MEMLOCK without
// CAP_IPC_LOCK) it warns and the model runs unlocked, as llama.cpp's --mlock does.
void lock_weights(const CausalLM& model);

// Puts a fresh latent-cache pool's pages on a rank's NUMA nodes (place_memory; `--numa`; where
// the system refuses, a warning naming the nodes, and the pages go where first touched), then
// faults them all in (fault_in_pages), as llama.cpp clears its KV buffer at start: the whole
// budget is committed at start-up, and no decode step pays a page fault for a new position.
void place_cache_pool(void* pool, size_t bytes, const std::vector<int>& numa_nodes);

// Reads DIR/config.json and the memory-mapped safetensors checkpoint of any supported family;
// its INT4 and MXFP4 weights take activations as `activation_quant` says (--act-quant).
std::unique_ptr<CausalLM> load_causal_lm(const std::string& model_dir,
                                         ActivationQuant activation_quant = ActivationQuant::Int8);

// One sequence's cache as one block of `capacity` positions at the start of a pool, followed by
// its recurrent state for models that have one: its bytes, and its view (block_table: {0}).
size_t sequence_cache_bytes(const ModelConfig& config, int64_t capacity, CacheDType dtype);
LatentCacheView sequence_cache_view(const ModelConfig& config, int64_t capacity, CacheDType dtype, void* pool,
                                    const int32_t* block_table);

// Such a cache in memory of its own. Fp32 storage is 4-byte aligned.
class SequenceCache {
 public:
  SequenceCache(const ModelConfig& config, int64_t capacity, CacheDType dtype = CacheDType::F32);
  const LatentCacheView& view() const { return view_; }
  size_t bytes() const { return storage_.size(); }

 private:
  std::vector<uint8_t> storage_;
  int32_t block_id_ = 0;
  LatentCacheView view_;
};

}  // namespace mlaserve
