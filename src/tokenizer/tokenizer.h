// Text <-> token ids for DeepSeek-V3-style tokenizer.json (byte-level BPE with a Sequence of
// Split pre-tokenizers) and Kimi-style tiktoken.model (ranks + Kimi's pattern + specials from
// tokenizer_config.json).
#pragma once
#include <array>
#include <cstdint>
#include <unordered_map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"

namespace mlaserve {

// Kimi K2's tiktoken pattern (tokenization_kimi.py); [A&&[^B]] is rewritten for PCRE2.
extern const char* const kKimiPattern;
constexpr int32_t kKimiReservedSpecialTokens = 256;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
};

class Tokenizer {
 public:
  // DIR/tokenizer.json, or DIR/tiktoken.model with DIR/tokenizer_config.json.
  static std::unique_ptr<Tokenizer> load(const std::string& model_dir);
  static std::unique_ptr<Tokenizer> from_hf_json(const nlohmann::json& tokenizer_json,
                                                 const nlohmann::json& tokenizer_config);
  // tiktoken rank file text ("base64 rank" lines), the split pattern, and added tokens. The
  // reserved_special_tokens ids after the ranks that no added token takes become special
  // "<|reserved_token_{id}|>" tokens (Kimi's tokenization_kimi.py reserves 256).
  static std::unique_ptr<Tokenizer> from_tiktoken(const std::string& ranks_text, const std::string& pattern,
                                                  std::vector<AddedToken> added_tokens,
                                                  int32_t reserved_special_tokens = 0);

  // Invalid UTF-8 is replaced by U+FFFD first. parse_special: added tokens in the text become
  // their ids (as HF does); otherwise they are encoded as plain text.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // A prompt: encode(), after the BOS token when tokenizer_config.json adds it (HF's
  // add_special_tokens=True).
  std::vector<int32_t> encode_prompt(std::string_view text, bool parse_special = true) const;
  // Concatenated bytes of the tokens (may end inside a UTF-8 sequence). Unknown ids are
  // skipped; special tokens too when skip_special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;
  std::optional<int32_t> token_id(std::string_view content) const;  // added tokens and vocab
  bool is_special(int32_t id) const;
  // Ids of ordinary vocabulary tokens whose bytes are complete UTF-8 text (no added tokens).
  std::vector<int32_t> text_token_ids() const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }

 private:
  Tokenizer() = default;
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  void set_added_tokens(std::vector<AddedToken> tokens);
  void set_special_ids(const nlohmann::json& tokenizer_config);
  void add_pre_tokenizer(const nlohmann::json& step);  // one of tokenizer.json's pre_tokenizer steps

  struct PreTokenizeStep {
    Regex regex;
    bool keep_gaps;  // HF Split "Isolated" keeps the text between matches; tiktoken drops it
  };
  std::vector<PreTokenizeStep> steps_;
  bool add_prefix_space_ = false;
  std::optional<BpeModel> model_;
  const AddedToken* added_token_at(std::string_view text, size_t position) const;
  const AddedToken* added_token_with_id(int32_t id) const;

  std::vector<AddedToken> added_tokens_;
  std::unordered_map<std::string, size_t> added_by_content_;  // -> index in added_tokens_
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::vector<size_t> added_lengths_;  // distinct content lengths, longest first
  std::array<bool, 256> added_first_byte_{};
  std::optional<int32_t> bos_id_, eos_id_;
  bool add_bos_ = false;
};

}  // namespace mlaserve
