#include "engine/drafter.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/error.h"

namespace mlaserve {
namespace {

// The tokens after the latest earlier occurrence of the last n tokens of `tokens`, at most
// `count` of them; empty when the suffix occurs nowhere before.
std::vector<int32_t> continue_suffix(std::span<const int32_t> tokens, int64_t n, int64_t count) {
  const int64_t length = int64_t(tokens.size());
  if (n >= length) return {};
  const auto suffix = tokens.subspan(size_t(length - n));
  for (int64_t start = length - n - 1; start >= 0; --start)
    if (std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) {
      const int64_t from = start + n, to = std::min(length, from + count);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  return {};
}

}  // namespace

NgramDrafter::NgramDrafter(int64_t min_ngram, int64_t max_ngram) : min_ngram_(min_ngram), max_ngram_(max_ngram) {
  MLA_CHECK(1 <= min_ngram && min_ngram <= max_ngram, "n-gram sizes must satisfy 1 <= min ({}) <= max ({})",
            min_ngram, max_ngram);
}

void NgramDrafter::propose(std::span<const std::span<const int32_t>> contexts, std::span<const int64_t> max_tokens,
                           std::vector<std::vector<int32_t>>& proposals) {
  proposals.resize(contexts.size());
  for (size_t i = 0; i < contexts.size(); ++i) {
    proposals[i].clear();
    if (max_tokens[i] <= 0) continue;
    for (int64_t n = max_ngram_; n >= min_ngram_ && proposals[i].empty(); --n)
      proposals[i] = continue_suffix(contexts[i], n, max_tokens[i]);
  }
}

std::string NgramDrafter::describe() const { return fmt::format("n-gram prompt lookup ({}..{} tokens)", min_ngram_, max_ngram_); }

std::unique_ptr<Drafter> make_drafter(const std::string& spec) {
  if (spec == "ngram") return std::make_unique<NgramDrafter>(1, 4);
  const std::string kind = spec.substr(0, spec.find(':'));
  MLA_CHECK(kind != "mtp" && kind != "draft" && kind != "dflash" && kind != "dspark",
            "--speculative {}: the {} drafter is not implemented yet (available: ngram)", spec, kind);
  fail("unknown --speculative '{}' (ngram; mtp, draft:DIR, dflash:DIR and dspark:DIR are not implemented yet)", spec);
}

}  // namespace mlaserve
