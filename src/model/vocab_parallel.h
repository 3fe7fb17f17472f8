// Vocabulary parallelism for the embedding and the LM head (Megatron-LM's vocab-parallel
// embedding and a row-split output layer): rank r of n holds rows [r * slice, (r + 1) * slice)
// of both, slice = ceil(vocab_size / n), so no rank reads the whole head every token.
#pragma once
#include <cstdint>
#include <span>

#include "io/linear_weight.h"
#include "model/causal_lm.h"
#include "parallel/communicator.h"

namespace mlaserve {

struct VocabSlice {
  int64_t begin = 0, end = 0;  // this rank's token ids
  static VocabSlice whole(int64_t vocab_size) { return {0, vocab_size}; }
  static VocabSlice of_rank(int64_t vocab_size, int size, int rank);  // may be empty
  int64_t size() const { return end - begin; }
};

// residual [n_tokens, hidden] = the batch's tokens' embedding rows: a rank fills the rows of
// tokens in its slice (zeros elsewhere) and the all-reduce on `comm` (null: one rank)
// assembles the whole lookup. `embed_tokens` holds the slice's rows. Throws Error naming a
// token outside [0, vocab_size).
void embed_vocab_slice(const LinearWeight& embed_tokens, const VocabSlice& slice, int64_t vocab_size, int64_t hidden,
                       std::span<const ForwardSequence> batch, float* residual, Communicator* comm);

// logits [n_rows, vocab_size] = lm_head x: every rank computes its slice's logits (padded to
// equal slices) and an all-gather assembles them on every rank. `lm_head` holds the slice's rows.
void project_vocab_slice(const LinearWeight& lm_head, const VocabSlice& slice, int64_t vocab_size, const float* x,
                         int64_t n_rows, float* logits, Communicator* comm);

}  // namespace mlaserve
