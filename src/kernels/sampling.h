// Token sampling from logits: greedy, or temperature with top-k / top-p (nucleus) / min-p
// filtering, with the filters applied in the order vLLM applies them (top-k, then top-p).
#pragma once
#include <cstdint>
#include <random>

namespace mlaserve {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: no limit
  float top_p = 1.0f;        // keep the smallest set of tokens whose probability reaches top_p
  float min_p = 0.0f;        // drop tokens below min_p * max probability
};

int32_t argmax(const float* logits, int64_t vocab_size);
int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace mlaserve
