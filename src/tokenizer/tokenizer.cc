#include "tokenizer/tokenizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "base/mmap_file.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// GPT-2's pattern, used by the ByteLevel pre-tokenizer when use_regex is true.
const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string base64_decode(std::string_view text) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const size_t value = alphabet.find(c);
    MLA_CHECK(value != std::string::npos, "tiktoken ranks: invalid base64 character '{}'", c);
    buffer = (buffer << 6) | uint32_t(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((buffer >> bits) & 0xff));
    }
  }
  return out;
}

std::string token_content(const json& value) {  // "text" or {"content": "text", ...}
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content")) return value["content"].get<std::string>();
  return {};
}

// tokenizer.json's model.merges as byte pairs: each merge a "left right" string or a
// [left, right] array, in the byte-level alphabet.
std::vector<std::pair<std::string, std::string>> byte_level_merges(const json& model) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const auto& merge : model.at("merges")) {
    std::string left, right;
    if (merge.is_array()) {
      left = merge.at(0).get<std::string>(), right = merge.at(1).get<std::string>();
    } else {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      MLA_CHECK(space != std::string::npos, "tokenizer.json: malformed merge '{}'", text);
      left = text.substr(0, space), right = text.substr(space + 1);
    }
    merges.emplace_back(byte_level_to_bytes(left).value_or(""), byte_level_to_bytes(right).value_or(""));
  }
  return merges;
}

// tokenizer_config.json's added_tokens_decoder: {"163586": {"content": "<|im_end|>", "special": true}, ...}.
std::vector<AddedToken> declared_added_tokens(const json& config) {
  const json decoder = config.value("added_tokens_decoder", json::object());  // a copy that outlives the loop
  MLA_CHECK(decoder.is_object(), "added_tokens_decoder must be an object of id -> token");
  std::vector<AddedToken> added;
  for (const auto& [id, token] : decoder.items()) {
    int32_t value = -1;
    const auto [end, error] = std::from_chars(id.data(), id.data() + id.size(), value);
    MLA_CHECK(error == std::errc() && end == id.data() + id.size() && value >= 0,
              "added_tokens_decoder: '{}' is not a token id", id);
    added.push_back({token.at("content").get<std::string>(), value, token.value("special", true)});
  }
  return added;
}

}  // namespace

const char* const kKimiPattern =
    R"([\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

void Tokenizer::set_added_tokens(std::vector<AddedToken> tokens) {
  added_tokens_ = std::move(tokens);
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& token = added_tokens_[i];
    if (token.content.empty()) continue;
    added_by_content_[token.content] = i;
    added_by_id_[token.id] = i;
    added_first_byte_[uint8_t(token.content[0])] = true;
    if (std::find(added_lengths_.begin(), added_lengths_.end(), token.content.size()) == added_lengths_.end())
      added_lengths_.push_back(token.content.size());
  }
  std::sort(added_lengths_.rbegin(), added_lengths_.rend());
}

// The longest added token starting at text[position] (HF matches leftmost-longest).
const AddedToken* Tokenizer::added_token_at(std::string_view text, size_t position) const {
  if (!added_first_byte_[uint8_t(text[position])]) return nullptr;
  for (size_t length : added_lengths_) {
    if (position + length > text.size()) continue;
    auto found = added_by_content_.find(std::string(text.substr(position, length)));
    if (found != added_by_content_.end()) return &added_tokens_[found->second];
  }
  return nullptr;
}

const AddedToken* Tokenizer::added_token_with_id(int32_t id) const {
  auto found = added_by_id_.find(id);
  return found == added_by_id_.end() ? nullptr : &added_tokens_[found->second];
}

void Tokenizer::set_special_ids(const json& config) {
  if (config.contains("bos_token")) bos_id_ = token_id(token_content(config["bos_token"]));
  if (config.contains("eos_token")) eos_id_ = token_id(token_content(config["eos_token"]));
  add_bos_ = config.value("add_bos_token", false) && bos_id_.has_value();
}

void Tokenizer::add_pre_tokenizer(const json& step) {
  const std::string type = step.value("type", "");
  if (type == "Split") {
    const std::string behavior = step.value("behavior", "");
    MLA_CHECK(behavior == "Isolated" && !step.value("invert", false),
              "tokenizer.json: Split behavior '{}' is not supported (Isolated)", behavior);
    const json& pattern = step.at("pattern");
    const std::string regex = pattern.contains("Regex") ? pattern["Regex"].get<std::string>() : "";
    MLA_CHECK(!regex.empty(), "tokenizer.json: Split needs a Regex pattern");
    steps_.push_back({Regex(rewrite_class_intersections(regex)), true});
  } else if (type == "ByteLevel") {
    add_prefix_space_ = step.value("add_prefix_space", false);
    if (step.value("use_regex", true)) steps_.push_back({Regex(kGpt2Pattern), true});
  } else {
    fail("tokenizer.json: pre_tokenizer '{}' is not supported (Sequence, Split, ByteLevel)", type);
  }
}

namespace {

// A token id in tokenizer.json: an integer in [0, BpeModel::kMaxTokenId).
int32_t token_id_of(const json& id) {
  MLA_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < BpeModel::kMaxTokenId,
            "tokenizer.json: token id {} is not an integer in [0, {})", id.dump(), BpeModel::kMaxTokenId);
  return int32_t(id.get<int64_t>());
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_json(const json& tokenizer_json, const json& config) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  const json& model = tokenizer_json.at("model");
  MLA_CHECK(model.value("type", "") == "BPE", "tokenizer.json: model.type '{}' is not supported (BPE)",
            model.value("type", ""));
  MLA_CHECK(!model.value("byte_fallback", false), "tokenizer.json: byte_fallback BPE is not supported");
  const json& normalizer = tokenizer_json.value("normalizer", json());
  MLA_CHECK(normalizer.is_null() ||
                (normalizer.value("type", "") == "Sequence" && normalizer.value("normalizers", json::array()).empty()),
            "tokenizer.json: normalizer {} is not supported", normalizer.dump());
  const json& pre = tokenizer_json.value("pre_tokenizer", json());
  if (pre.is_object() && pre.value("type", "") == "Sequence")
    for (const auto& step : pre.at("pretokenizers")) tokenizer->add_pre_tokenizer(step);
  else if (!pre.is_null())
    tokenizer->add_pre_tokenizer(pre);
  std::vector<AddedToken> added;
  for (const auto& token : tokenizer_json.value("added_tokens", json::array()))
    added.push_back(
        {token.at("content").get<std::string>(), token_id_of(token.at("id")), token.value("special", false)});
  tokenizer->set_added_tokens(std::move(added));
  BpeModel::Vocab vocab;
  for (const auto& [text, id] : model.at("vocab").items()) {
    if (tokenizer->added_by_content_.count(text)) continue;  // an added token, matched before BPE
    auto bytes = byte_level_to_bytes(text);
    MLA_CHECK(bytes.has_value(), "tokenizer.json: vocab entry '{}' is not byte-level", text);
    vocab.emplace_back(*bytes, token_id_of(id));
  }
  tokenizer->model_ = BpeModel::from_merges(vocab, byte_level_merges(model), model.value("ignore_merges", false));
  tokenizer->set_special_ids(config);
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::from_tiktoken(const std::string& ranks_text, const std::string& pattern,
                                                    std::vector<AddedToken> added_tokens,
                                                    int32_t reserved_special_tokens) {
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  BpeModel::Vocab ranks;
  std::istringstream lines(ranks_text);
  std::string encoded;
  int64_t rank;
  while (lines >> encoded >> rank) {
    MLA_CHECK(rank >= 0 && rank < BpeModel::kMaxTokenId, "tiktoken ranks: rank {} of entry {} is outside [0, {})", rank,
              ranks.size(), BpeModel::kMaxTokenId);
    ranks.emplace_back(base64_decode(encoded), int32_t(rank));
  }
  MLA_CHECK(lines.eof(), "tiktoken ranks: malformed line after {} entries", ranks.size());
  const int32_t base = int32_t(ranks.size());
  for (int32_t id = base; id < base + reserved_special_tokens; ++id)
    if (std::none_of(added_tokens.begin(), added_tokens.end(), [&](const AddedToken& t) { return t.id == id; }))
      added_tokens.push_back({fmt::format("<|reserved_token_{}|>", id), id, true});
  tokenizer->model_ = BpeModel::from_ranks(ranks);
  tokenizer->steps_.push_back({Regex(rewrite_class_intersections(pattern)), false});
  tokenizer->set_added_tokens(std::move(added_tokens));
  return tokenizer;
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (is_gguf_path(model_dir)) {
    const HfTokenizerFiles files = gguf_tokenizer_files(model_dir);
    try {
      return from_hf_json(files.tokenizer, files.config);
    } catch (const json::exception& e) {
      fail("'{}': tokenizer.ggml.*: {}", model_dir, e.what());
    }
  }
  const fs::path dir(model_dir);
  json config = json::object();
  if (fs::exists(dir / "tokenizer_config.json")) {
    try {
      config = json::parse(read_text_file((dir / "tokenizer_config.json").string()));
    } catch (const json::exception& e) {
      fail("'{}/tokenizer_config.json': not valid JSON: {}", model_dir, e.what());
    }
  }
  if (fs::exists(dir / "tokenizer.json")) {
    try {
      return from_hf_json(json::parse(read_text_file((dir / "tokenizer.json").string())), config);
    } catch (const json::exception& e) {
      fail("'{}/tokenizer.json': {}", model_dir, e.what());
    }
  }
  MLA_CHECK(fs::exists(dir / "tiktoken.model"), "'{}' has neither tokenizer.json nor tiktoken.model", model_dir);
  try {
    auto tokenizer = from_tiktoken(read_text_file((dir / "tiktoken.model").string()), kKimiPattern,
                                   declared_added_tokens(config), kKimiReservedSpecialTokens);
    tokenizer->set_special_ids(config);
    return tokenizer;
  } catch (const json::exception& e) {
    fail("'{}/tokenizer_config.json': {}", model_dir, e.what());
  }
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<int32_t>& out) const {
  std::string prefixed;
  if (add_prefix_space_ && !text.empty() && text.front() != ' ') {
    prefixed.assign(1, ' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::pair<size_t, size_t>> pieces = {{0, text.size()}};
  for (const auto& step : steps_) {
    std::vector<std::pair<size_t, size_t>> next;
    for (const auto& [begin, end] : pieces) {
      size_t cursor = begin;
      for (const auto& [match_begin, match_end] : step.regex.find_all(text.substr(begin, end - begin))) {
        if (step.keep_gaps && begin + match_begin > cursor) next.emplace_back(cursor, begin + match_begin);
        next.emplace_back(begin + match_begin, begin + match_end);
        cursor = begin + match_end;
      }
      if (step.keep_gaps && cursor < end) next.emplace_back(cursor, end);
    }
    pieces = std::move(next);
  }
  for (const auto& [begin, end] : pieces) model_->encode_piece(text.substr(begin, end - begin), out);
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  if (add_bos_ && bos_id_) ids.push_back(*bos_id_);
  const std::vector<int32_t> encoded = encode(text, parse_special);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  return ids;
}

std::vector<int32_t> Tokenizer::encode(std::string_view raw_text, bool parse_special) const {
  const std::string text = sanitize_utf8(raw_text);
  std::vector<int32_t> ids;
  size_t segment_start = 0, i = 0;
  while (i < text.size()) {
    const AddedToken* found = parse_special ? added_token_at(text, i) : nullptr;
    if (!found) {
      ++i;
      continue;
    }
    encode_ordinary(std::string_view(text).substr(segment_start, i - segment_start), ids);
    ids.push_back(found->id);
    i += found->content.size();
    segment_start = i;
  }
  encode_ordinary(std::string_view(text).substr(segment_start), ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (const AddedToken* added = added_token_with_id(id)) {
      if (!(skip_special && added->special)) out += added->content;
    } else if (const std::string* bytes = model_->bytes_of(id)) {
      out += *bytes;
    }
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view content) const {
  auto found = added_by_content_.find(std::string(content));
  if (found != added_by_content_.end()) return added_tokens_[found->second].id;
  return model_->id_of(content);
}

std::vector<int32_t> Tokenizer::text_token_ids() const {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id <= model_->max_id(); ++id) {
    const std::string* bytes = model_->bytes_of(id);
    if (bytes && !bytes->empty() && !added_token_with_id(id) && sanitize_utf8(*bytes) == *bytes) ids.push_back(id);
  }
  return ids;
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* added = added_token_with_id(id);
  return added && added->special;
}

}  // namespace mlaserve
