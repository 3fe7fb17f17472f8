#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace mlaserve {

int32_t argmax(const float* logits, int64_t vocab_size) {
  return int32_t(std::max_element(logits, logits + vocab_size) - logits);
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params,
                     std::mt19937_64& rng) {
  if (params.temperature <= 0.0f || params.top_k == 1) return argmax(logits, vocab_size);
  thread_local std::vector<int32_t> ids;  // reused: a vocabulary-sized order every token
  thread_local std::vector<double> probs;
  ids.resize(static_cast<size_t>(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t kept = vocab_size;
  if (params.top_k > 0 && params.top_k < vocab_size) {
    kept = params.top_k;
    std::partial_sort(ids.begin(), ids.begin() + kept, ids.end(), by_logit);
  } else {
    std::sort(ids.begin(), ids.end(), by_logit);
  }
  probs.resize(static_cast<size_t>(kept));
  const double max_logit = logits[ids[0]];
  double sum = 0.0;
  for (int64_t i = 0; i < kept; ++i)
    sum += probs[i] = std::exp((double(logits[ids[i]]) - max_logit) / params.temperature);
  for (auto& p : probs) p /= sum;
  if (params.top_p < 1.0f) {  // smallest prefix (in descending order) reaching top_p
    double cumulative = 0.0;
    int64_t prefix = 0;
    while (prefix < kept && cumulative < params.top_p) cumulative += probs[prefix++];
    kept = std::max<int64_t>(1, prefix);
  }
  if (params.min_p > 0.0f) {
    const double threshold = params.min_p * probs[0];
    while (kept > 1 && probs[kept - 1] < threshold) --kept;
  }
  std::discrete_distribution<int64_t> pick(probs.begin(), probs.begin() + kept);
  return ids[pick(rng)];
}

}  // namespace mlaserve
