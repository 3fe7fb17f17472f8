// Benchmark prompts, as SGLang's bench_serving and vllm bench serve make them: random token
// ids decoded to text with the model's tokenizer, adjusted until the text re-tokenizes to the
// intended length. Lengths vary uniformly in [len (1 - range_ratio), len (1 + range_ratio)]
// (vLLM's --random-range-ratio; 0 keeps every length exact).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mlaserve {

struct BenchPrompt {
  std::string text;
  int64_t input_tokens = 0;   // tokens the text encodes to
  int64_t output_tokens = 0;  // max_tokens to request
};

struct RandomDataset {
  int64_t input_len = 1024, output_len = 400;
  double range_ratio = 0.0;
  int64_t num_prompts = 100;
  uint64_t seed = 0;
};

// mismatched: prompts whose text could not be made to re-tokenize to the drawn length.
std::vector<BenchPrompt> make_random_prompts(const Tokenizer& tokenizer, const RandomDataset& options,
                                             int64_t* mismatched = nullptr);

// SGLang's generated-shared-prefix dataset (--gsp-*; its defaults): num_groups random system
// prompts of system_prompt_len tokens, each followed ("\n\n") by prompts_per_group random
// questions of question_len tokens, the prompts shuffled: the prefix-cache workload (a long
// shared system prompt, a short question after it). input_tokens: the whole text's count.
struct SharedPrefixDataset {
  int64_t num_groups = 64, prompts_per_group = 16, system_prompt_len = 2048, question_len = 128, output_len = 256;
  uint64_t seed = 0;
};
std::vector<BenchPrompt> make_shared_prefix_prompts(const Tokenizer& tokenizer, const SharedPrefixDataset& options);

}  // namespace mlaserve
