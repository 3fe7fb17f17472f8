#include "engine/single_sequence.h"

namespace mlaserve {

SingleSequence::SingleSequence(ModelExecutor& executor, int64_t capacity, CacheDType dtype)
    : executor_(executor), view_(sequence_cache_view(executor.config(), capacity, dtype, nullptr, &block_id_)) {
  view_.pool = executor_.allocate_cache(sequence_cache_bytes(executor.config(), capacity, dtype));
}

void SingleSequence::forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits,
                             MlaPath path) {
  const ForwardSequence sequence{tokens, start, view_, path,
                                 all_logits ? ForwardSequence::Logits::All : ForwardSequence::Logits::Last};
  executor_.forward(std::span(&sequence, 1), logits);
}

}  // namespace mlaserve
