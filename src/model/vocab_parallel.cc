#include "model/vocab_parallel.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kernels/dequantize.h"
#include "kernels/linear.h"

namespace mlaserve {

VocabSlice VocabSlice::of_rank(int64_t vocab_size, int size, int rank) {
  const int64_t slice = (vocab_size + size - 1) / size;
  return {std::min(vocab_size, slice * rank), std::min(vocab_size, slice * (rank + 1))};
}

void embed_vocab_slice(const LinearWeight& embed_tokens, const VocabSlice& slice, int64_t vocab_size, int64_t hidden,
                       std::span<const ForwardSequence> batch, float* residual, Communicator* comm) {
  int64_t row = 0;
  for (const auto& seq : batch)
    for (int32_t token : seq.tokens) {
      MLA_CHECK(token >= 0 && token < vocab_size, "token id {} is outside [0, {})", token, vocab_size);
      float* out = residual + hidden * row++;
      if (token >= slice.begin && token < slice.end)
        dequantize_row(embed_tokens, token - slice.begin, out);
      else
        std::fill(out, out + hidden, 0.0f);
    }
  if (comm) comm->all_reduce_sum(residual, row * hidden);
}

void project_vocab_slice(const LinearWeight& lm_head, const VocabSlice& slice, int64_t vocab_size, const float* x,
                         int64_t n_rows, float* logits, Communicator* comm) {
  if (!comm) return linear(lm_head, x, n_rows, logits);
  const int64_t ranks = comm->size(), padded = (vocab_size + ranks - 1) / ranks, local_rows = slice.end - slice.begin;
  thread_local std::vector<float> local, gathered, packed;  // reused from step to step
  local.assign(size_t(n_rows * padded), 0.0f);
  gathered.resize(size_t(ranks * n_rows * padded));
  packed.resize(size_t(n_rows * std::max<int64_t>(local_rows, 1)));
  if (local_rows > 0) linear(lm_head, x, n_rows, packed.data());
  for (int64_t t = 0; t < n_rows; ++t)
    std::copy_n(packed.data() + t * local_rows, local_rows, local.data() + t * padded);
  comm->all_gather(local.data(), n_rows * padded, gathered.data());
  for (int64_t r = 0; r < ranks; ++r)
    for (int64_t t = 0; t < n_rows; ++t) {
      const int64_t begin = r * padded, count = std::max<int64_t>(0, std::min(vocab_size, begin + padded) - begin);
      std::copy_n(gathered.data() + (r * n_rows + t) * padded, count, logits + t * vocab_size + begin);
    }
}

}  // namespace mlaserve
