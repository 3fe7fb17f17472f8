#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace mlaserve {
namespace {

TokenLogprobs log_probabilities(const float* logits, int64_t vocab_size, int32_t chosen, int64_t top_n) {
  const float max_logit = *std::max_element(logits, logits + vocab_size);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(double(logits[i]) - max_logit);
  const float log_sum = float(std::log(sum)) + max_logit;
  TokenLogprobs out;
  out.logprob = logits[chosen] - log_sum;
  std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  const int64_t n = std::min(top_n, vocab_size);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int64_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logits[ids[i]] - log_sum);
  return out;
}

}  // namespace

RequestSampler::RequestSampler(const SamplingOptions& options, std::span<const int32_t> prompt)
    : options_(options), rng_(options.seed ? *options.seed : std::random_device{}()) {
  if (options.repetition_penalty != 1.0f) {
    prompt_tokens_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
    prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
  }
}

int32_t RequestSampler::sample(float* logits, int64_t vocab_size, TokenLogprobs* logprobs) {
  std::vector<float> raw;
  if (logprobs && options_.logprobs >= 0) raw.assign(logits, logits + vocab_size);
  if (options_.repetition_penalty != 1.0f) {  // HF/vLLM: prompt and output tokens alike
    auto penalise = [&](int32_t id) {
      float& logit = logits[id];
      logit = logit > 0 ? logit / options_.repetition_penalty : logit * options_.repetition_penalty;
    };
    for (int32_t id : prompt_tokens_) penalise(id);
    for (const auto& [id, count] : output_counts_)
      if (!std::binary_search(prompt_tokens_.begin(), prompt_tokens_.end(), id)) penalise(id);
  }
  for (const auto& [id, count] : output_counts_)  // OpenAI: output tokens only
    logits[id] -= options_.presence_penalty + options_.frequency_penalty * float(count);
  for (const auto& [id, bias] : options_.logit_bias)
    if (id < vocab_size) logits[id] += bias;
  const int32_t token = sample_token(logits, vocab_size, options_.params, rng_);
  ++output_counts_[token];
  if (!raw.empty()) *logprobs = log_probabilities(raw.data(), vocab_size, token, options_.logprobs);
  return token;
}

}  // namespace mlaserve
