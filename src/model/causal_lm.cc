#include "model/causal_lm.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/mmap_file.h"
#include "base/numa.h"
#include "kernels/norm.h"
#include "model/deepseek_v3.h"
#include "model/kimi_linear.h"

namespace mlaserve {

void capture_layer_states(const HiddenStates& hidden, int layer, const float* states, int64_t n_tokens, int64_t width) {
  const int64_t stride = int64_t(hidden.layers.size()) * width;
  for (size_t slot = 0; slot < hidden.layers.size(); ++slot) {
    if (hidden.layers[slot] != layer) continue;
    for (int64_t t = 0; t < n_tokens; ++t)
      std::copy_n(states + t * width, width, hidden.data + t * stride + int64_t(slot) * width);
  }
}

void capture_final_norm(const HiddenStates& hidden, const float* residual, const float* norm, double eps,
                        int64_t n_tokens, int64_t width) {
  const int64_t stride = int64_t(hidden.layers.size()) * width;
  for (size_t slot = 0; slot < hidden.layers.size(); ++slot)
    if (hidden.layers[slot] == HiddenStates::kFinalNorm)
      rms_norm(residual, width, norm, n_tokens, width, eps, hidden.data + int64_t(slot) * width, stride);
}

int64_t logit_rows(std::span<const ForwardSequence> batch) {
  int64_t rows = 0;
  for (const auto& seq : batch)
    rows += seq.logits == ForwardSequence::Logits::All    ? int64_t(seq.tokens.size())
            : seq.logits == ForwardSequence::Logits::Last ? 1
                                                          : 0;
  return rows;
}

void layout_batch(std::span<const ForwardSequence> batch, BatchLayout& layout) {
  layout.sequences.clear();
  layout.logit_tokens.clear();
  layout.n_tokens = 0;
  for (const auto& seq : batch) {
    const int64_t count = int64_t(seq.tokens.size()), first = layout.n_tokens;
    MLA_CHECK(count > 0, "forward needs at least one token per sequence");
    MLA_CHECK(seq.start_position + count <= seq.cache.capacity(), "sequence of {} tokens exceeds its cache capacity {}",
              seq.start_position + count, seq.cache.capacity());
    layout.sequences.push_back({first, count, seq.start_position, seq.cache, seq.path});
    if (seq.logits == ForwardSequence::Logits::All)
      for (int64_t t = 0; t < count; ++t) layout.logit_tokens.push_back(first + t);
    else if (seq.logits == ForwardSequence::Logits::Last)
      layout.logit_tokens.push_back(first + count - 1);
    layout.n_tokens += count;
  }
}

double active_weight_bytes(double total_bytes, double embedding_bytes, double routed_bytes, const ModelConfig& config) {
  const double routed_active = config.n_routed_experts > 0
                                   ? routed_bytes * double(config.num_experts_per_tok) / double(config.n_routed_experts)
                                   : 0.0;
  return total_bytes - embedding_bytes - routed_bytes + routed_active +
         (config.tie_word_embeddings ? embedding_bytes : 0.0) + embedding_bytes / double(config.vocab_size);
}

void CausalLM::forward(std::span<const int32_t> tokens, int64_t start_position, const LatentCacheView& cache,
                       bool all_logits, float* logits, MlaPath path) const {
  const ForwardSequence seq{tokens, start_position, cache, path,
                            all_logits ? ForwardSequence::Logits::All : ForwardSequence::Logits::Last};
  forward(std::span(&seq, 1), logits);
}

size_t CausalLM::weight_bytes() const {
  size_t total = 0;
  for_each_weight([&](const LinearWeight& weight) { total += weight.bytes(); });
  return total;
}

void place_cache_pool(void* pool, size_t bytes, const std::vector<int>& numa_nodes) {
  if (const std::string error = place_memory(pool, bytes, numa_nodes); !error.empty())
    spdlog::warn("a latent cache could not be placed on NUMA node(s) {} ({})", format_cpu_list(numa_nodes), error);
  if (bytes >= size_t(1) << 30) spdlog::info("committing the {:.2f} GiB cache pool", double(bytes) / double(1 << 30));
  fault_in_pages(pool, bytes);
}

void lock_weights(const CausalLM& model) {
  size_t locked = 0;
  int error = 0;
  model.for_each_weight([&](const LinearWeight& weight) {
    for (const ByteRange& range : weight.stored_ranges()) {
      if (error == 0) error = lock_in_memory(range.begin, range.bytes);
      if (error == 0) locked += range.bytes;
    }
  });
  if (error != 0) {
    spdlog::warn(
        "--mlock: locking the weights in RAM stopped after {:.2f} GB: {} (raise the limit with `ulimit -l` "
        "or run with CAP_IPC_LOCK); the rest stay unlocked",
        double(locked) / 1e9, std::strerror(error));
    return;
  }
  spdlog::info("locked {:.2f} GB of weights in RAM (mlock)", double(locked) / 1e9);
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& model_dir, ActivationQuant activation_quant) {
  const ModelConfig config = load_model_config(model_dir);
  if (config.is_kimi_linear()) return KimiLinearModel::load(model_dir, activation_quant);
  return DeepseekV3Model::load(model_dir, activation_quant);
}

size_t sequence_cache_bytes(const ModelConfig& config, int64_t capacity, CacheDType dtype) {
  return size_t(capacity * config.kv_bytes_per_token(dtype)) + size_t(config.recurrent_state_bytes());
}

LatentCacheView sequence_cache_view(const ModelConfig& config, int64_t capacity, CacheDType dtype, void* pool,
                                    const int32_t* block_table) {
  LatentCacheView view;
  view.pool = pool;
  if (config.recurrent_state_bytes() > 0)
    view.state_offset = int64_t(sequence_cache_bytes(config, capacity, dtype)) - config.recurrent_state_bytes();
  view.dtype = dtype;
  view.block_table = block_table;
  view.n_blocks = 1;
  view.block_size = capacity;
  view.n_layers = config.cache_layers();
  view.latent_dim = config.kv_latent_dim();
  view.rope_dim = config.qk_rope_head_dim;
  return view;
}

SequenceCache::SequenceCache(const ModelConfig& config, int64_t capacity, CacheDType dtype)
    : storage_(sequence_cache_bytes(config, capacity, dtype)),
      view_(sequence_cache_view(config, capacity, dtype, storage_.data(), &block_id_)) {}

}  // namespace mlaserve
