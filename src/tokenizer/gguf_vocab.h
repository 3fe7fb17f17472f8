// The tokenizer a GGUF carries (tokenizer.ggml.*) as the Hugging Face files it was converted
// from, so that the tokenizer and the chat template load through the same code as a model
// directory's: byte-level BPE (`gpt2`) with the pre-tokenizer `tokenizer.ggml.pre` names.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace mlaserve {

struct HfTokenizerFiles {
  nlohmann::json tokenizer;  // tokenizer.json: model (BPE vocab and merges), added tokens, pre-tokenizer
  nlohmann::json config;     // tokenizer_config.json: bos/eos tokens, add_bos_token, chat_template
};

// Throws Error naming the key when one is missing, of the wrong type or not supported.
HfTokenizerFiles gguf_tokenizer_files(const std::string& path);

}  // namespace mlaserve
