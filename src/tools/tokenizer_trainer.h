// Writes the tokenizer of a make-model checkpoint: a DeepSeek-V3-style byte-level BPE
// tokenizer.json (same pre-tokenizer, special and role tokens) whose merges are learned from
// a small built-in corpus, padded with place-holder tokens to the model's vocab_size as
// DeepSeek-V3's own vocabulary is; and tokenizer_config.json.
#pragma once
#include <cstdint>
#include <string>

namespace mlaserve {

void write_tokenizer_files(const std::string& model_dir, int64_t vocab_size);

}  // namespace mlaserve
