// Per-request sampling state: penalties over the tokens seen so far, logit biases, a seeded
// generator, and log-probabilities of the model's raw distribution (before penalties, biases
// and temperature, as vLLM reports them).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"
#include "kernels/sampling.h"

namespace mlaserve {

struct SamplingOptions {
  SamplingParams params;                              // temperature, top_k, top_p, min_p
  float repetition_penalty = 1.0f;                    // >1 discourages prompt and output tokens (divides logits)
  float presence_penalty = 0.0f;                      // subtracted once from tokens already generated
  float frequency_penalty = 0.0f;                     // subtracted per occurrence in the output
  std::vector<std::pair<int32_t, float>> logit_bias;  // (id, bias) added to the logits (OpenAI)
  std::optional<uint64_t> seed;                       // same seed and prompt: same output
  int64_t logprobs = -1;                              // -1: none; N >= 0: the sampled token's and the top N
  // Constrained decoding: only tokens the grammar allows from the text so far are sampled.
  std::shared_ptr<const grammar::Grammar> grammar;
};

struct TokenLogprobs {
  float logprob = 0.0f;                        // of the sampled token
  std::vector<std::pair<int32_t, float>> top;  // top N (id, logprob), best first
};

class RequestSampler {
 public:
  // vocabulary: the tokens' bytes, needed when options.grammar is set.
  RequestSampler(const SamplingOptions& options, std::span<const int32_t> prompt,
                 std::shared_ptr<const grammar::Vocabulary> vocabulary = nullptr);
  // Picks the next token from logits [vocab] (modified in place by the penalties).
  int32_t sample(float* logits, int64_t vocab_size, TokenLogprobs* logprobs);
  // Speculative decoding: the target's logits [drafts.size() + 1, vocab] at the last token and
  // at each draft (modified in place). Returns the tokens to emit: the drafts accepted, then
  // the target's token at the first rejection, or the bonus token after the last draft. A
  // draft is accepted with the target's probability of it under this request's penalties,
  // temperature and filters, and a rejected one is replaced by a draw from the target's
  // distribution without it: chain_speculative_sampling with the draft's probability one (a
  // drafter proposes deterministically). So every emitted token is distributed as sampling
  // the target alone would draw it; greedy, drafts are accepted while they equal the argmax.
  std::vector<int32_t> verify(float* logits, std::span<const int32_t> drafts, int64_t vocab_size,
                              std::vector<TokenLogprobs>* logprobs);
  // How many of a draft's tokens the grammar allows in a row (all of them without a grammar).
  size_t allowed_draft_length(std::span<const int32_t> draft);

 private:
  void adjust(float* logits, int64_t vocab_size);  // grammar mask, penalties and logit biases
  void chose(int32_t token);                       // counts it and advances the grammar
  SamplingOptions options_;
  std::optional<grammar::Matcher> matcher_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<int32_t> prompt_tokens_;  // distinct, for the repetition penalty
};

}  // namespace mlaserve
