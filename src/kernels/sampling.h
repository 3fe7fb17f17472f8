// Token sampling from logits: greedy, or temperature with top-k / top-p (nucleus) / min-p
// filtering, with the filters applied in the order vLLM applies them (top-k, then top-p, then
// min-p), each on the distribution the previous one left (FlashInfer's top_k_renorm_prob).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace mlaserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability reaches top_p
  float min_p = 0.0f;        // drop tokens below min_p * max probability
};

int32_t argmax(const float* logits, int64_t vocab_size);

// The tokens a temperature sample draws from and their unnormalised probabilities,
// e^((logit - max logit) / temperature), after the filters (temperature > 0). Without top-p
// the vocabulary is never sorted: top-k selects its k (a partial sort), and top-p sorts only
// as far down the order as the nucleus reaches (in slices that grow 4x). ids are in
// descending logit order (lowest id first on ties) when top-k or top-p ran, else in id order.
struct SamplingCandidates {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};
void sampling_candidates(const float* logits, int64_t vocab_size, const SamplingParams& params,
                         SamplingCandidates& candidates);

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace mlaserve
