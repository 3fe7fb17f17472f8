// What proposes tokens for speculative decoding: one interface for every drafter — given each
// running sequence's tokens, propose up to k tokens that may follow them. The engine verifies
// every sequence's proposal in its next batched forward and keeps the longest accepted prefix
// (RequestSampler::verify), so a drafter only affects speed, never the output.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace mlaserve {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // proposals[i]: at most max_tokens[i] tokens to follow contexts[i] (may be empty).
  virtual void propose(std::span<const std::span<const int32_t>> contexts, std::span<const int64_t> max_tokens,
                       std::vector<std::vector<int32_t>>& proposals) = 0;
  virtual std::string describe() const = 0;
};

// Prompt lookup (vLLM's "ngram", llama.cpp's lookup decoding): the longest suffix of the
// sequence, of max_ngram tokens down to min_ngram, that occurred earlier in it (prompt or
// output); proposes the tokens that followed its latest earlier occurrence. No model.
class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t min_ngram, int64_t max_ngram);
  void propose(std::span<const std::span<const int32_t>> contexts, std::span<const int64_t> max_tokens,
               std::vector<std::vector<int32_t>>& proposals) override;
  std::string describe() const override;

 private:
  int64_t min_ngram_, max_ngram_;
};

// The drafter `--speculative` names: "ngram" (prompt lookup, n-grams of 1 to 4 tokens). The
// model drafters of the speculative-decoding issue ("mtp", "draft:DIR", "dflash:DIR",
// "dspark:DIR") are refused by name until they exist.
std::unique_ptr<Drafter> make_drafter(const std::string& spec);

}  // namespace mlaserve
