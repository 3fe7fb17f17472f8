#include "model/causal_lm.h"

#include "model/deepseek_v3.h"
#include "model/kimi_linear.h"

namespace mlaserve {

int64_t logit_rows(std::span<const ForwardSequence> batch) {
  int64_t rows = 0;
  for (const auto& seq : batch)
    rows += seq.logits == ForwardSequence::Logits::All ? int64_t(seq.tokens.size())
            : seq.logits == ForwardSequence::Logits::Last ? 1 : 0;
  return rows;
}

void CausalLM::forward(std::span<const int32_t> tokens, int64_t start_position, const LatentCacheView& cache,
                       bool all_logits, float* logits, MlaPath path) const {
  const ForwardSequence seq{tokens, start_position, cache, path,
                            all_logits ? ForwardSequence::Logits::All : ForwardSequence::Logits::Last};
  forward(std::span(&seq, 1), logits);
}

std::unique_ptr<CausalLM> load_causal_lm(const std::string& model_dir) {
  const ModelConfig config = load_model_config(model_dir);
  if (config.is_kimi_linear()) return KimiLinearModel::load(model_dir);
  return DeepseekV3Model::load(model_dir);
}

SequenceCache::SequenceCache(const ModelConfig& config, int64_t capacity, CacheDType dtype)
    : storage_(size_t(capacity * config.cache_layers() * config.kv_latent_dim()) * cache_dtype_size(dtype) +
               size_t(config.recurrent_state_bytes())) {
  view_.pool = storage_.data();
  if (config.recurrent_state_bytes() > 0)
    view_.state_offset = int64_t(storage_.size()) - config.recurrent_state_bytes();
  view_.dtype = dtype;
  view_.block_table = &block_id_;
  view_.n_blocks = 1;
  view_.block_size = capacity;
  view_.n_layers = config.cache_layers();
  view_.latent_dim = config.kv_latent_dim();
}

}  // namespace mlaserve
