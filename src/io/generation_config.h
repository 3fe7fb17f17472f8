// What a checkpoint recommends for generation: the tokens that end a turn and the default
// sampling parameters, from generation_config.json (as transformers' GenerationConfig reads
// it) and config.json. A request's own parameters override the defaults, as vLLM does with
// --generation-config auto.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlaserve {

struct GenerationConfig {
  // generation_config.json's eos_token_id (an id or a list), then config.json's (and, for
  // Kimi K3, its text_config's): generation stops at any of them. Kimi K2 ends a chat turn on
  // <|im_end|> (generation_config.json) while its tokenizer's eos_token is [EOS].
  std::vector<int32_t> eos_token_ids;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
};

// DIR/generation_config.json (optional) and DIR/config.json. Throws Error naming the file and
// key when a present value has the wrong type.
GenerationConfig load_generation_config(const std::string& model_dir);

}  // namespace mlaserve
