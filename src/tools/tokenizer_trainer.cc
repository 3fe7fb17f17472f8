#include "tools/tokenizer_trainer.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tools/tokenizer_corpus.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

// DeepSeek-V3's pre-tokenizer: digits in runs of up to 3, CJK runs, then words/punctuation.
const char* const kDigitsPattern = R"(\p{N}{1,3})";
const char* const kCjkPattern = "[一-龥぀-ゟ゠-ヿ]+";
const char* const kWordPattern =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr int64_t kMaxMerges = 4000;

json split_step(const char* pattern) {
  return {{"type", "Split"}, {"pattern", {{"Regex", pattern}}}, {"behavior", "Isolated"}, {"invert", false}};
}

// Pieces of the corpus after the three Isolated splits, with their counts.
std::map<std::string, int64_t> corpus_pieces() {
  std::vector<std::string> pieces = {kTokenizerCorpus};
  for (const char* pattern : {kDigitsPattern, kCjkPattern, kWordPattern}) {
    const Regex regex(pattern);
    std::vector<std::string> next;
    for (const auto& piece : pieces) {
      size_t cursor = 0;
      for (const auto& [begin, end] : regex.find_all(piece)) {
        if (begin > cursor) next.push_back(piece.substr(cursor, begin - cursor));
        next.push_back(piece.substr(begin, end - begin));
        cursor = end;
      }
      if (cursor < piece.size()) next.push_back(piece.substr(cursor));
    }
    pieces = std::move(next);
  }
  std::map<std::string, int64_t> counts;
  for (const auto& piece : pieces) ++counts[piece];
  return counts;
}

// Classic BPE training: merge the most frequent adjacent pair (ties: smallest pair) until
// no pair occurs twice or max_merges is reached. Returns merges as raw byte strings.
std::vector<std::pair<std::string, std::string>> learn_merges(int64_t max_merges) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [piece, count] : corpus_pieces()) {
    std::vector<std::string> symbols;
    for (char byte : piece) symbols.emplace_back(1, byte);
    words.emplace_back(std::move(symbols), count);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (int64_t(merges.size()) < max_merges) {
    std::map<std::pair<std::string, std::string>, int64_t> pair_counts;
    for (const auto& [symbols, count] : words)
      for (size_t i = 0; i + 1 < symbols.size(); ++i) pair_counts[{symbols[i], symbols[i + 1]}] += count;
    auto best = pair_counts.end();
    for (auto it = pair_counts.begin(); it != pair_counts.end(); ++it)
      if (best == pair_counts.end() || it->second > best->second) best = it;
    if (best == pair_counts.end() || best->second < 2) break;
    const auto [left, right] = best->first;
    merges.emplace_back(left, right);
    for (auto& [symbols, count] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          merged.push_back(left + right);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols = std::move(merged);
    }
  }
  return merges;
}

bool is_word(const std::string& bytes, bool allow_leading_space) {
  if (bytes.empty()) return false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const char c = bytes[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!letter && !(allow_leading_space && i == 0 && c == ' ' && bytes.size() > 1)) return false;
  }
  return true;
}

// Extends the learned merges up to `target` with joins of learned word pieces (" the" +
// "ory"), so every id of the vocabulary decodes to text. Any merge of two vocabulary tokens
// is a valid BPE rule; these rank after all learned ones, so common text encodes as before.
void extend_merges(std::vector<std::pair<std::string, std::string>>& merges, int64_t target) {
  std::vector<std::string> heads, tails;
  std::set<std::string> vocab;
  for (int byte = 0; byte < 256; ++byte) vocab.insert(std::string(1, char(byte)));
  for (const auto& [left, right] : merges) {
    const std::string token = left + right;
    vocab.insert(token);
    if (is_word(token, true) && token[0] == ' ') heads.push_back(token);
    if (is_word(token, false)) tails.push_back(token);
  }
  // Joined tokens become heads in turn, so the supply of new words does not run out.
  for (size_t h = 0; h < heads.size() && int64_t(merges.size()) < target; ++h) {
    const std::string head = heads[h];
    for (size_t t = 0; t < tails.size() && int64_t(merges.size()) < target; ++t) {
      const std::string& tail = tails[(h + t) % tails.size()];
      if (!vocab.insert(head + tail).second) continue;
      merges.emplace_back(head, tail);
      heads.push_back(head + tail);
    }
  }
}

json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

// The built-in DeepSeek-V3 format (ChatTemplate::built_in) as Jinja, for system/user/assistant.
const char* const kChatTemplate =
    "{% set ns = namespace(system_prompt='', first=true) %}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{% if not ns.first %}{% set ns.system_prompt = "
    "ns.system_prompt + '\\n\\n' %}{% endif %}{% set ns.system_prompt = ns.system_prompt + "
    "message['content'] %}{% set ns.first = false %}{% endif %}{% endfor %}{{ bos_token }}"
    "{{ ns.system_prompt }}{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ '<｜User｜>' + message['content'] }}{% elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}";

std::string base64(std::string_view bytes) {
  static const char* const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t group = 0;
    for (size_t k = 0; k < 3; ++k) group = group << 8 | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? alphabet[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

void write_json(const std::filesystem::path& path, const json& value) {
  std::ofstream out(path);
  out << value.dump(2) << "\n";
  MLA_CHECK(out.good(), "cannot write '{}'", path.string());
}

}  // namespace

void write_tokenizer_files(const std::string& model_dir, int64_t vocab_size) {
  const std::vector<std::string> leading_specials = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  const std::vector<std::string> role_tokens = {"<｜User｜>", "<｜Assistant｜>"};
  const int64_t fixed = int64_t(leading_specials.size() + 256 + role_tokens.size());
  MLA_CHECK(vocab_size >= fixed, "vocab_size {} is too small for a byte-level tokenizer (needs {})", vocab_size, fixed);
  auto merges = learn_merges(std::min(kMaxMerges, vocab_size - fixed));
  extend_merges(merges, vocab_size - fixed);
  json vocab = json::object(), merge_list = json::array(), added = json::array();
  int64_t next_id = 0;
  for (const auto& content : leading_specials) added.push_back(added_token(next_id++, content, true));
  for (int byte = 0; byte < 256; ++byte) vocab[bytes_to_byte_level(std::string(1, char(byte)))] = next_id++;
  for (const auto& [left, right] : merges) {
    vocab[bytes_to_byte_level(left + right)] = next_id++;
    merge_list.push_back(bytes_to_byte_level(left) + " " + bytes_to_byte_level(right));
  }
  for (const auto& content : role_tokens) added.push_back(added_token(next_id++, content, false));
  for (int64_t k = 0; next_id < vocab_size; ++k)
    added.push_back(added_token(next_id++, fmt::format("<｜place▁holder▁no▁{}｜>", k), true));
  const json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {split_step(kDigitsPattern),
          split_step(kCjkPattern),
          split_step(kWordPattern),
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  const json config = {{"add_bos_token", true},
                       {"add_eos_token", false},
                       {"bos_token", leading_specials[0]},
                       {"eos_token", leading_specials[1]},
                       {"pad_token", leading_specials[1]},
                       {"clean_up_tokenization_spaces", false},
                       {"model_max_length", 131072},
                       {"tokenizer_class", "LlamaTokenizerFast"},
                       {"chat_template", kChatTemplate}};
  const std::filesystem::path dir(model_dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump() << "\n";
  write_json(dir / "tokenizer_config.json", config);
}

const std::vector<std::pair<int, const char*>> kKimiK3SpecialTokens = {
    {0, "[BOS]"},   {1, "[EOS]"},    {2, "<|end_of_msg|>"}, {3, "<|open|>"}, {4, "<|close|>"},
    {5, "<|sep|>"}, {8, "<|MASK|>"}, {254, "[UNK]"},        {255, "[PAD]"}};

void write_kimi_k3_tokenizer_files(const std::string& model_dir, int64_t vocab_size) {
  MLA_CHECK(vocab_size >= 512 + kKimiReservedSpecialTokens,
            "vocab_size {} is too small for a Kimi K3 tokenizer (needs {})", vocab_size,
            512 + kKimiReservedSpecialTokens);
  const int64_t ranks = vocab_size - kKimiReservedSpecialTokens;
  auto merges = learn_merges(std::min(kMaxMerges, ranks - 256));
  extend_merges(merges, ranks - 256);
  std::string text;
  for (int byte = 0; byte < 256; ++byte) text += fmt::format("{} {}\n", base64(std::string(1, char(byte))), byte);
  for (size_t i = 0; i < merges.size(); ++i)
    text += fmt::format("{} {}\n", base64(merges[i].first + merges[i].second), 256 + i);
  json decoder = json::object();
  for (const auto& [offset, content] : kKimiK3SpecialTokens)
    decoder[std::to_string(ranks + offset)] = {{"content", content}, {"lstrip", false},      {"normalized", false},
                                               {"rstrip", false},    {"single_word", false}, {"special", true}};
  const std::filesystem::path dir(model_dir);
  std::ofstream(dir / "tiktoken.model") << text;
  write_json(dir / "tokenizer_config.json", {{"added_tokens_decoder", decoder},
                                             {"bos_token", "[BOS]"},
                                             {"eos_token", "[EOS]"},
                                             {"pad_token", "[PAD]"},
                                             {"unk_token", "[UNK]"},
                                             {"model_max_length", 1048576},
                                             {"tokenizer_class", "TikTokenTokenizer"}});
}

}  // namespace mlaserve
