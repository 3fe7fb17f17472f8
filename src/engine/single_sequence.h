// One sequence run straight on an executor, with every position's logits at hand: what
// `logits` and `perplexity` need, and the engine's scheduler does not give. Its cache is one
// block of `capacity` positions (and the recurrent state, for models that have one) in the
// executor's pool, fp32 by default so that the maths is the reference's.
#pragma once
#include <cstdint>
#include <span>

#include "engine/executor.h"

namespace mlaserve {

class SingleSequence {
 public:
  SingleSequence(ModelExecutor& executor, int64_t capacity, CacheDType dtype = CacheDType::F32);
  // Runs `tokens` at positions [start, start + n): logits [n, vocab] if all_logits, else [1, vocab].
  void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits,
               MlaPath path = MlaPath::Auto);

 private:
  ModelExecutor& executor_;
  int32_t block_id_ = 0;
  LatentCacheView view_;
};

}  // namespace mlaserve
