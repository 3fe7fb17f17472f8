#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"

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
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (int64_t i = 0; i < n; ++i) out.top.emplace_back(ids[i], logits[ids[i]] - log_sum);
  return out;
}

}  // namespace

RequestSampler::RequestSampler(const SamplingOptions& options, std::span<const int32_t> prompt,
                               std::shared_ptr<const grammar::Vocabulary> vocabulary)
    : options_(options), rng_(options.seed ? *options.seed : std::random_device{}()) {
  if (options.grammar) {
    MLA_CHECK(vocabulary, "constrained decoding needs the vocabulary's token bytes");
    matcher_.emplace(options.grammar, std::move(vocabulary));
  }
  if (options.repetition_penalty != 1.0f) {
    prompt_tokens_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_tokens_.begin(), prompt_tokens_.end());
    prompt_tokens_.erase(std::unique(prompt_tokens_.begin(), prompt_tokens_.end()), prompt_tokens_.end());
  }
}

void RequestSampler::adjust(float* logits, int64_t vocab_size) {
  if (matcher_) grammar::apply_token_mask(matcher_->allowed_tokens(), logits, vocab_size);  // before the penalties
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
}

int32_t RequestSampler::sample(float* logits, int64_t vocab_size, TokenLogprobs* logprobs) {
  std::vector<float> raw;
  if (logprobs && options_.logprobs >= 0) raw.assign(logits, logits + vocab_size);
  adjust(logits, vocab_size);
  const int32_t token = sample_token(logits, vocab_size, options_.params, rng_);
  chose(token);
  if (!raw.empty()) *logprobs = log_probabilities(raw.data(), vocab_size, token, options_.logprobs);
  return token;
}

void RequestSampler::chose(int32_t token) {
  ++output_counts_[token];
  if (matcher_)
    MLA_CHECK(matcher_->accept_token(token),
              "constrained decoding: no token continues the grammar here (token {} sampled)", token);
}

size_t RequestSampler::allowed_draft_length(std::span<const int32_t> draft) {
  return matcher_ ? matcher_->allowed_prefix(draft) : draft.size();
}

std::vector<int32_t> RequestSampler::verify(float* logits, std::span<const int32_t> drafts, int64_t vocab_size,
                                            std::vector<TokenLogprobs>* logprobs) {
  thread_local std::vector<float> target, draft_probs;  // the op's [2, vocab] target (row 1 unused) and one-hot q
  target.resize(size_t(2 * vocab_size));
  draft_probs.assign(size_t(vocab_size), 0.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<int32_t> emitted;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    float* row = logits + int64_t(i) * vocab_size;
    TokenLogprobs token_logprobs;
    if (i == drafts.size()) {  // every draft accepted: the bonus token, as a plain step
      emitted.push_back(sample(row, vocab_size, logprobs ? &token_logprobs : nullptr));
      if (logprobs) logprobs->push_back(std::move(token_logprobs));
      break;
    }
    std::vector<float> raw;
    if (logprobs && options_.logprobs >= 0) raw.assign(row, row + vocab_size);
    adjust(row, vocab_size);
    sampling_probs(row, vocab_size, options_.params, target.data());
    std::copy(target.begin(), target.begin() + vocab_size, target.begin() + vocab_size);
    const int32_t draft = drafts[i];
    draft_probs[size_t(draft)] = 1.0f;
    const float uniforms[2] = {uniform(rng_), uniform(rng_)};
    int32_t out[2], accepted = 0, kept = 0;
    chain_speculative_sampling(draft_probs.data(), &draft, target.data(), 1, 1, vocab_size, uniforms, out, &accepted,
                               &kept);
    draft_probs[size_t(draft)] = 0.0f;
    emitted.push_back(out[0]);
    chose(out[0]);
    if (logprobs)
      logprobs->push_back(raw.empty() ? TokenLogprobs{}
                                      : log_probabilities(raw.data(), vocab_size, out[0], options_.logprobs));
    if (kept == 0) break;
  }
  return emitted;
}

}  // namespace mlaserve
