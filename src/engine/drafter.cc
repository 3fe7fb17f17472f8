#include "engine/drafter.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "engine/block_drafter.h"
#include "engine/model_drafter.h"
#include "engine/mtp_drafter.h"

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
  MLA_CHECK(1 <= min_ngram && min_ngram <= max_ngram, "n-gram sizes must satisfy 1 <= min ({}) <= max ({})", min_ngram,
            max_ngram);
}

void NgramDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  proposals.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    proposals[i].clear();
    if (requests[i].max_tokens <= 0) continue;
    for (int64_t n = max_ngram_; n >= min_ngram_ && proposals[i].empty(); --n)
      proposals[i] = continue_suffix(requests[i].tokens, n, requests[i].max_tokens);
  }
}

std::string NgramDrafter::describe() const {
  return fmt::format("n-gram prompt lookup ({}..{} tokens)", min_ngram_, max_ngram_);
}

void check_drafter_spec(const std::string& spec) {
  if (spec == "ngram") return;
  const std::string kind = spec.substr(0, spec.find(':'));
  if (kind == "draft" || kind == "dflash" || kind == "dspark") {
    const std::string dir = spec.size() > kind.size() ? spec.substr(kind.size() + 1) : "";
    MLA_CHECK(!dir.empty(), "--speculative {}:DIR needs the draft model's directory", kind);
    MLA_CHECK(std::filesystem::exists(std::filesystem::path(dir) / "config.json"),
              "--speculative {}: no config.json in '{}'", spec, dir);
    return;
  }
  if (spec == "mtp") return;
  fail("unknown --speculative '{}' (ngram, mtp, draft:DIR, dflash:DIR, dspark:DIR)", spec);
}

std::unique_ptr<Drafter> make_drafter(const std::string& spec, const CausalLM* target) {
  check_drafter_spec(spec);
  if (spec == "ngram") return std::make_unique<NgramDrafter>(1, 4);
  if (spec == "mtp") {
    MLA_CHECK(target != nullptr, "internal: the mtp drafter needs the target model");
    return std::make_unique<MtpDrafter>(next_token_module(*target));
  }
  const std::string kind = spec.substr(0, spec.find(':')), dir = spec.substr(spec.find(':') + 1);
  if (kind == "draft") return std::make_unique<DraftModelDrafter>(load_causal_lm(dir), dir);
  MLA_CHECK(target != nullptr, "internal: the {} drafter needs the target model", kind);
  return std::make_unique<BlockDrafter>(std::make_unique<BlockDraftModel>(dir, *target), dir, kind == "dspark");
}

}  // namespace mlaserve
