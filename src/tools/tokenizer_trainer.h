// Writes the tokenizer of a make-model checkpoint: a DeepSeek-V3-style byte-level BPE
// tokenizer.json (same pre-tokenizer, special and role tokens) whose merges are learned from
// a small built-in corpus, padded with place-holder tokens to the model's vocab_size as
// DeepSeek-V3's own vocabulary is; and tokenizer_config.json. Or Kimi K3's tiktoken layout.
#pragma once
#include <cstdint>
#include <string>

namespace mlaserve {

void write_tokenizer_files(const std::string& model_dir, int64_t vocab_size);

// Kimi K3's layout: tiktoken.model (the 256 bytes, then merges learned the same way, as ranks)
// and tokenizer_config.json's added_tokens_decoder with K3's special tokens in the 256 ids after
// the ranks ([BOS], [EOS], <|end_of_msg|>, <|open|>, <|close|>, <|sep|>, <|MASK|>, ... [PAD]).
// The first special id is vocab_size - 256.
void write_kimi_k3_tokenizer_files(const std::string& model_dir, int64_t vocab_size);

}  // namespace mlaserve
