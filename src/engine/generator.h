// Single-sequence generation on a contiguous latent cache: prefill the prompt, then decode
// one token at a time with the absorbed MLA path, sampling each token.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "model/deepseek_v3.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
};

struct GenerateStats {
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Runs `tokens` at positions [start, start + n) of the one sequence being generated and writes
// the last token's logits [vocab]: a single model, or one run as ranks.
using SequenceForward = std::function<void(std::span<const int32_t> tokens, int64_t start, float* logits)>;

// on_token(id) is called for every generated token, in order; returning false stops early.
GenerateStats generate(const SequenceForward& forward, int64_t vocab_size, const GenerateRequest& request,
                       const std::function<bool(int32_t)>& on_token);

// Turns a stream of token ids into text, holding back bytes of an unfinished UTF-8 character
// so that every emitted chunk is valid UTF-8.
class TextStreamer {
 public:
  explicit TextStreamer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string finish();          // whatever is left (invalid tails become U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace mlaserve
