#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"

namespace mlaserve {
namespace {

// -log softmax(logits)[target], in double.
double negative_log_likelihood(const float* logits, int64_t vocab_size, int32_t target) {
  const float max_logit = *std::max_element(logits, logits + vocab_size);
  double sum = 0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(double(logits[i]) - double(max_logit));
  return std::log(sum) + double(max_logit) - double(logits[target]);
}

}  // namespace

PerplexityResult perplexity(std::span<const int32_t> ids, std::optional<int32_t> bos, int64_t ctx, int64_t max_chunks,
                            int64_t vocab_size, const ChunkLogits& forward, const PerplexityProgress& progress) {
  MLA_CHECK(ctx >= 4, "perplexity: --ctx must be at least 4, got {}", ctx);
  const int64_t available = int64_t(ids.size()) / ctx;
  MLA_CHECK(available >= 1, "perplexity: the text has {} tokens, fewer than one chunk of --ctx {}", ids.size(), ctx);
  const int64_t chunks = max_chunks > 0 ? std::min(max_chunks, available) : available;
  const int64_t first = ctx / 2;
  std::vector<int32_t> chunk(size_t(ctx), 0);
  std::vector<float> logits(size_t(ctx * vocab_size));
  double sum = 0, sum_squares = 0;
  int64_t count = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    std::copy_n(ids.begin() + c * ctx, ctx, chunk.begin());
    if (bos) chunk[0] = *bos;
    forward(chunk, logits.data());
    for (int64_t j = first; j + 1 < ctx; ++j) {
      const double nll = negative_log_likelihood(logits.data() + j * vocab_size, vocab_size, chunk[size_t(j + 1)]);
      sum += nll, sum_squares += nll * nll, ++count;
    }
    if (progress) progress(c + 1, chunks, std::exp(sum / double(count)));
  }
  PerplexityResult result;
  result.mean_nll = sum / double(count);
  result.perplexity = std::exp(result.mean_nll);
  const double variance = std::max(0.0, sum_squares / double(count) - result.mean_nll * result.mean_nll);
  result.nll_stderr = count > 1 ? std::sqrt(variance / double(count - 1)) : 0.0;
  result.chunks = chunks;
  result.scored_tokens = count;
  return result;
}

}  // namespace mlaserve
