#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/simd.h"

namespace mlaserve {

int32_t argmax(const float* logits, int64_t vocab_size) {
  return int32_t(std::max_element(logits, logits + vocab_size) - logits);
}

namespace {

// Sorts candidates [0, kept) of `ids` by descending logit only as far as the smallest prefix
// whose weights reach top_p of their total (slices of 64, 256, ...: each an nth_element of
// the rest and a sort of the slice); returns that prefix's length, at least 1 (the most likely
// token, also for top_p <= 0). ids [0, sorted_end) are already in order.
template <class ByLogit>
int64_t nucleus(std::vector<int32_t>& ids, int64_t kept, int64_t sorted_end, const std::vector<float>& weight_of,
                float top_p, ByLogit by_logit) {
  double total = 0.0;
  for (int64_t i = 0; i < kept; ++i) total += weight_of[size_t(ids[size_t(i)])];
  const double target = double(top_p) * total;
  double cumulative = 0.0;
  int64_t prefix = 0;
  while (prefix < kept && (prefix == 0 || cumulative < target)) {
    if (prefix == sorted_end) {
      const int64_t next = std::min(kept, std::max<int64_t>(64, 4 * sorted_end));
      if (next < kept) std::nth_element(ids.begin() + sorted_end, ids.begin() + next, ids.begin() + kept, by_logit);
      std::sort(ids.begin() + sorted_end, ids.begin() + next, by_logit);
      sorted_end = next;
    }
    cumulative += weight_of[size_t(ids[size_t(prefix++)])];
  }
  return prefix;
}

}  // namespace

void sampling_candidates(const float* logits, int64_t vocab_size, const SamplingParams& params,
                         SamplingCandidates& candidates) {
  // weight_of[id]: e^((logit - max) / temperature), set for the candidates only.
  thread_local std::vector<float> weight_of;
  weight_of.resize(size_t(vocab_size));
  const float inverse_temperature = 1.0f / params.temperature;
  std::vector<int32_t>& ids = candidates.ids;
  ids.resize(size_t(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  const auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  int64_t kept = vocab_size;
  bool sorted = false;
  if (params.top_k > 0 && params.top_k < vocab_size) {
    kept = params.top_k;
    std::partial_sort(ids.begin(), ids.begin() + kept, ids.end(), by_logit);
    sorted = true;
    const float top = logits[ids[0]] * inverse_temperature;
    for (int64_t i = 0; i < kept; ++i)
      weight_of[size_t(ids[size_t(i)])] = std::exp(logits[ids[size_t(i)]] * inverse_temperature - top);
  } else {
    for (int64_t v = 0; v < vocab_size; ++v) weight_of[size_t(v)] = logits[v] * inverse_temperature;
    simd::exp_shifted(weight_of.data(), vocab_size, simd::max_of(weight_of.data(), vocab_size));
  }
  if (params.top_p < 1.0f) {
    kept = nucleus(ids, kept, sorted ? kept : 0, weight_of, params.top_p, by_logit);
    sorted = true;
  }
  if (params.min_p > 0.0f) {  // the most likely token has the largest weight and always stays
    const float largest = sorted ? weight_of[size_t(ids[0])] : simd::max_of(weight_of.data(), vocab_size);
    const float threshold = std::min(params.min_p, 1.0f) * largest;
    int64_t out = 0;
    for (int64_t i = 0; i < kept; ++i)
      if (weight_of[size_t(ids[size_t(i)])] >= threshold) ids[size_t(out++)] = ids[size_t(i)];
    kept = out;
  }
  ids.resize(size_t(kept));
  candidates.weights.resize(size_t(kept));
  for (int64_t i = 0; i < kept; ++i) candidates.weights[size_t(i)] = weight_of[size_t(ids[size_t(i)])];
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params,
                     std::mt19937_64& rng) {
  if (params.temperature <= 0.0f || params.top_k == 1) return argmax(logits, vocab_size);
  thread_local SamplingCandidates candidates;  // reused: vocabulary-sized every token
  sampling_candidates(logits, vocab_size, params, candidates);
  double total = 0.0;
  for (float weight : candidates.weights) total += weight;
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double cumulative = 0.0;
  for (size_t i = 0; i < candidates.ids.size(); ++i)
    if (u < (cumulative += candidates.weights[i])) return candidates.ids[i];
  return candidates.ids.back();  // u within rounding of the total
}

}  // namespace mlaserve
