// Shared test helpers: temporary directories, tiny models written by make-model, and a
// comparator that reports the worst element (NaN never passes).
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "tools/make_model.h"

namespace mlaserve::testing {

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tiny-preset config with small sizes (hidden 64, 2 layers, 16 experts, vocab 512).
nlohmann::json micro_config();
void write_model(const std::string& dir, const nlohmann::json& config, StorageDType dtype, uint64_t seed);

// max |got - want| / max |want|, asserting equal sizes and no NaN/inf in `got`.
::testing::AssertionResult relative_close(const std::vector<float>& got, const std::vector<float>& want,
                                          double tolerance);

std::vector<float> random_vector(size_t n, uint64_t seed, float scale = 1.0f);

// A trained model the repository commits under models/ (e.g. "kjv").
std::string committed_model(const std::string& name);

// The target's hidden states at `layers` (HiddenStates' ids) for tokens [start, end) of one
// sequence, computed into `cache` as a prefill chunk: what a drafter is shown.
std::vector<float> target_states(const CausalLM& target, SequenceCache& cache, std::span<const int32_t> tokens,
                                 int64_t start, int64_t end, std::span<const int> layers);

}  // namespace mlaserve::testing
