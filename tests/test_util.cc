#include "test_util.h"

#include <cmath>
#include <filesystem>
#include <random>

#include "tools/model_presets.h"

namespace mlaserve::testing {

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "mlaserve-test-XXXXXX").string();
  path_ = ::mkdtemp(pattern.data());
}

TempDir::~TempDir() { std::filesystem::remove_all(path_); }

nlohmann::json micro_config() {
  nlohmann::json config = model_preset("tiny");
  config.merge_patch({{"hidden_size", 64},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"q_lora_rank", 32},
                      {"kv_lora_rank", 32},
                      {"qk_nope_head_dim", 16},
                      {"qk_rope_head_dim", 8},
                      {"v_head_dim", 16},
                      {"moe_intermediate_size", 32},
                      {"intermediate_size", 96},
                      {"n_routed_experts", 16},
                      {"n_group", 4},
                      {"topk_group", 2},
                      {"num_experts_per_tok", 4},
                      {"vocab_size", 512}});
  return config;
}

void write_model(const std::string& dir, const nlohmann::json& config, StorageDType dtype, uint64_t seed) {
  MakeModelOptions options;
  options.config = config;
  options.dtype = dtype;
  options.seed = seed;
  options.shard_bytes = 0;
  options.out_dir = dir;
  make_model(options);
}

::testing::AssertionResult relative_close(const std::vector<float>& got, const std::vector<float>& want,
                                          double tolerance) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  double max_want = 0, max_error = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << "non-finite value at " << i;
    max_want = std::max(max_want, std::fabs(double(want[i])));
    const double error = std::fabs(double(got[i]) - double(want[i]));
    if (error > max_error) max_error = error, worst = i;
  }
  const double relative = max_error / std::max(max_want, 1e-30);
  if (relative <= tolerance) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "relative error " << relative << " > " << tolerance << "; worst element "
                                       << worst << ": got " << got[worst] << ", want " << want[worst];
}

std::string committed_model(const std::string& name) { return std::string(MLASERVE_MODELS_DIR) + "/" + name; }

std::vector<float> random_vector(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (auto& v : values) v = normal(rng);
  return values;
}

std::vector<float> target_states(const CausalLM& target, SequenceCache& cache, std::span<const int32_t> tokens,
                                 int64_t start, int64_t end, std::span<const int> layers) {
  std::vector<float> states(size_t((end - start) * int64_t(layers.size()) * target.config().hidden_size));
  std::vector<float> logits(size_t(target.config().vocab_size));
  const ForwardSequence chunk{tokens.subspan(size_t(start), size_t(end - start)), start, cache.view(), MlaPath::Auto,
                              ForwardSequence::Logits::Last};
  const HiddenStates wanted{layers, states.data()};
  target.forward(std::span(&chunk, 1), logits.data(), &wanted);
  return states;
}

}  // namespace mlaserve::testing
