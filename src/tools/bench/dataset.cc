#include "tools/bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"

namespace mlaserve {
namespace {

// Text of exactly `length` tokens when the tokenizer allows: decode random ids, re-encode,
// then truncate or extend the ids and try again.
BenchPrompt prompt_of_length(const Tokenizer& tokenizer, const std::vector<int32_t>& vocab, int64_t length,
                             std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> pick(0, vocab.size() - 1);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < length; ++i) ids.push_back(vocab[pick(rng)]);
  BenchPrompt prompt;
  for (int attempt = 0; attempt < 20; ++attempt) {
    prompt.text = tokenizer.decode(ids);
    ids = tokenizer.encode(prompt.text, false);
    prompt.input_tokens = int64_t(ids.size());
    if (prompt.input_tokens == length) break;
    if (prompt.input_tokens > length) ids.resize(size_t(length));
    while (int64_t(ids.size()) < length) ids.push_back(vocab[pick(rng)]);
  }
  return prompt;
}

int64_t draw_length(int64_t length, double ratio, std::mt19937_64& rng) {
  const int64_t low = std::max<int64_t>(1, int64_t(std::floor(double(length) * (1.0 - ratio))));
  const int64_t high = std::max(low, int64_t(std::ceil(double(length) * (1.0 + ratio))));
  return std::uniform_int_distribution<int64_t>(low, high)(rng);
}

}  // namespace

std::vector<BenchPrompt> make_random_prompts(const Tokenizer& tokenizer, const RandomDataset& options,
                                             int64_t* mismatched) {
  MLA_CHECK(options.input_len > 0 && options.output_len > 0 && options.num_prompts > 0,
            "--input-len, --output-len and --num-prompts must be positive");
  MLA_CHECK(options.range_ratio >= 0.0 && options.range_ratio < 1.0, "--range-ratio must be in [0, 1)");
  const std::vector<int32_t> vocab = tokenizer.text_token_ids();
  MLA_CHECK(!vocab.empty(), "the tokenizer has no text tokens to build prompts from");
  std::mt19937_64 rng(options.seed);
  std::vector<BenchPrompt> prompts;
  int64_t off = 0;
  for (int64_t i = 0; i < options.num_prompts; ++i) {
    const int64_t input = draw_length(options.input_len, options.range_ratio, rng);
    BenchPrompt prompt = prompt_of_length(tokenizer, vocab, input, rng);
    off += prompt.input_tokens != input;
    prompt.output_tokens = draw_length(options.output_len, options.range_ratio, rng);
    prompts.push_back(std::move(prompt));
  }
  if (mismatched) *mismatched = off;
  return prompts;
}

std::vector<BenchPrompt> make_shared_prefix_prompts(const Tokenizer& tokenizer, const SharedPrefixDataset& options) {
  MLA_CHECK(options.num_groups > 0 && options.prompts_per_group > 0 && options.system_prompt_len > 0 &&
                options.question_len > 0 && options.output_len > 0,
            "--gsp-num-groups, --gsp-prompts-per-group, --gsp-system-prompt-len, --gsp-question-len and "
            "--gsp-output-len must be positive");
  const std::vector<int32_t> vocab = tokenizer.text_token_ids();
  MLA_CHECK(!vocab.empty(), "the tokenizer has no text tokens to build prompts from");
  std::mt19937_64 rng(options.seed);
  std::vector<BenchPrompt> prompts;
  for (int64_t group = 0; group < options.num_groups; ++group) {
    const std::string system = prompt_of_length(tokenizer, vocab, options.system_prompt_len, rng).text;
    for (int64_t i = 0; i < options.prompts_per_group; ++i) {
      BenchPrompt prompt;
      prompt.text = system + "\n\n" + prompt_of_length(tokenizer, vocab, options.question_len, rng).text;
      prompt.input_tokens = int64_t(tokenizer.encode(prompt.text, false).size());
      prompt.output_tokens = options.output_len;
      prompts.push_back(std::move(prompt));
    }
  }
  std::shuffle(prompts.begin(), prompts.end(), rng);
  return prompts;
}

}  // namespace mlaserve
