// Tokenizer::load on a directory laid out as Kimi K2 / K3 / Linear checkpoints ship their
// tokenizer: tiktoken.model with 163,584 ranks, and tokenizer_config.json whose
// added_tokens_decoder names some of the 256 special ids after them.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "base/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using testing::TempDir;

constexpr int32_t kKimiBaseTokens = 163584;

std::string base64(const std::string& bytes) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k) chunk = chunk << 8 | (k < n ? uint8_t(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? alphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The 256 bytes, the merges of "hello", then filler tokens (0xff and three bytes, which no
// UTF-8 text contains) up to Kimi's 163,584 ranks.
void write_kimi_ranks(const std::string& path) {
  std::ofstream out(path);
  int32_t rank = 0;
  for (int byte = 0; byte < 256; ++byte) out << base64(std::string(1, char(byte))) << ' ' << rank++ << '\n';
  for (const char* merged : {"he", "ll", "hell", "hello"}) out << base64(merged) << ' ' << rank++ << '\n';
  for (int32_t filler = 0; rank < kKimiBaseTokens; ++filler) {
    const std::string bytes = {char(0xff), char(filler >> 16), char((filler >> 8) & 0xff), char(filler & 0xff)};
    out << base64(bytes) << ' ' << rank++ << '\n';
  }
}

void write_kimi_tokenizer(const std::string& dir) {
  write_kimi_ranks(dir + "/tiktoken.model");
  nlohmann::json decoder;
  const std::pair<int32_t, const char*> specials[] = {{163584, "[BOS]"},
                                                      {163585, "[EOS]"},
                                                      {163586, "<|im_end|>"},
                                                      {163587, "<|im_user|>"},
                                                      {163588, "<|im_assistant|>"},
                                                      {163594, "<|im_system|>"},
                                                      {163601, "<|im_middle|>"},
                                                      {163838, "[UNK]"},
                                                      {163839, "[PAD]"}};
  for (const auto& [id, content] : specials)
    decoder[std::to_string(id)] = {{"content", content}, {"lstrip", false},      {"normalized", false},
                                   {"rstrip", false},    {"single_word", false}, {"special", true}};
  const nlohmann::json config = {{"added_tokens_decoder", decoder},
                                 {"bos_token", "[BOS]"},
                                 {"eos_token", "[EOS]"},
                                 {"pad_token", "[PAD]"},
                                 {"unk_token", "[UNK]"},
                                 {"tokenizer_class", "TikTokenTokenizer"}};
  std::ofstream(dir + "/tokenizer_config.json") << config.dump(2);
}

TEST(TokenizerLoad, KimiLayoutWithAddedTokensDecoder) {
  TempDir dir;
  write_kimi_tokenizer(dir.path());
  const auto tokenizer = Tokenizer::load(dir.path());
  EXPECT_EQ(tokenizer->bos_id(), 163584);
  EXPECT_EQ(tokenizer->eos_id(), 163585);
  EXPECT_EQ(tokenizer->token_id("<|im_end|>"), 163586);
  const std::string turn = "<|im_user|>user<|im_middle|>hello<|im_end|>";
  const std::vector<int32_t> ids = tokenizer->encode(turn);
  const std::vector<int32_t> want = {163587, 'u', 's', 'e', 'r', 163601, 259, 163586};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(tokenizer->decode(ids, false), turn);
  EXPECT_EQ(tokenizer->decode(ids, true), "userhello");
  EXPECT_TRUE(tokenizer->is_special(163586));
}

TEST(TokenizerLoad, KimiReservedIdsDecodeAsTheirNames) {
  TempDir dir;
  write_kimi_tokenizer(dir.path());
  const auto tokenizer = Tokenizer::load(dir.path());
  const std::vector<int32_t> reserved = {163590};
  EXPECT_EQ(tokenizer->decode(reserved, false), "<|reserved_token_163590|>");
  EXPECT_EQ(tokenizer->decode(reserved, true), "");
  EXPECT_EQ(tokenizer->token_id("<|reserved_token_163837|>"), 163837);
  EXPECT_FALSE(tokenizer->token_id("<|reserved_token_163840|>").has_value());  // past the 256
}

TEST(TokenizerLoad, MalformedAddedTokenIdIsAnErrorNamingIt) {
  TempDir dir;
  write_kimi_tokenizer(dir.path());
  std::ofstream(dir.file("tokenizer_config.json"))
      << R"({"added_tokens_decoder": {"12x": {"content": "<|a|>", "special": true}}})";
  try {
    Tokenizer::load(dir.path());
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'12x' is not a token id"), std::string::npos) << e.what();
  }
}

// An id that is not an integer in range is an error naming it (a double such as 1.3e31 was
// converted to int32 out of range: undefined behaviour the fuzzer's UBSan caught).
TEST(TokenizerLoad, TokenIdsOutOfRangeAreErrors) {
  nlohmann::json tokenizer = {
      {"model", {{"type", "BPE"}, {"vocab", nlohmann::json::object()}, {"merges", nlohmann::json::array()}}}};
  for (const auto& id :
       {nlohmann::json(1.3e31), nlohmann::json(-1), nlohmann::json(int64_t(1) << 40), nlohmann::json("7")}) {
    tokenizer["added_tokens"] = {{{"id", id}, {"content", "<s>"}, {"special", true}}};
    try {
      Tokenizer::from_hf_json(tokenizer, nlohmann::json::object());
      ADD_FAILURE() << "accepted id " << id.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("token id " + id.dump() + " is not an integer"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mlaserve
