#include "tokenizer/bpe.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

BpeModel::Vocab byte_vocab() {
  BpeModel::Vocab vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(std::string(1, char(b)), b);
  return vocab;
}

TEST(Bpe, ByteLevelMapIsReversible) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(byte_level_to_bytes(bytes_to_byte_level(all)), all);
  EXPECT_EQ(bytes_to_byte_level(" "), "Ġ");
  EXPECT_EQ(bytes_to_byte_level("\n"), "Ċ");
}

TEST(Bpe, MergesApplyByRankLeftmostFirst) {
  BpeModel::Vocab vocab = byte_vocab();
  vocab.emplace_back("ab", 256);
  vocab.emplace_back("bc", 257);
  vocab.emplace_back("abc", 258);
  // "b c" ranks before "a b": "abc" -> a + bc (no merge a+bc) -> [a, bc].
  auto model = BpeModel::from_merges(vocab, {{"b", "c"}, {"a", "b"}}, false);
  std::vector<int32_t> ids;
  model.encode_piece("abc", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', 257}));
  // Same rank twice in "abab": both merge, leftmost first.
  ids.clear();
  model.encode_piece("abab", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 256}));
}

TEST(Bpe, TiktokenRanksMergeByConcatenation) {
  BpeModel::Vocab ranks = byte_vocab();
  ranks.emplace_back("ab", 256);
  ranks.emplace_back("abab", 257);
  auto model = BpeModel::from_ranks(ranks);
  std::vector<int32_t> ids;
  model.encode_piece("ababa", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{257, 'a'}));
}

// Tables are sized by the largest id: a file with an absurd one is an error, not gigabytes.
TEST(Bpe, IdsBeyondTheCeilingAreErrors) {
  BpeModel::Vocab ranks = byte_vocab();
  ranks.emplace_back("ab", BpeModel::kMaxTokenId);
  EXPECT_THROW(BpeModel::from_ranks(ranks), Error);
  try {
    Tokenizer::from_tiktoken("QQ== 0\nQg== 2000000000\n", kKimiPattern, {});
    ADD_FAILURE() << "a rank of 2e9 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2000000000"), std::string::npos) << e.what();
  }
}

TEST(Bpe, LongPieceDoesNotGoQuadratic) {
  BpeModel::Vocab vocab = byte_vocab();
  vocab.emplace_back("aa", 256);
  auto model = BpeModel::from_merges(vocab, {{"a", "a"}}, false);
  std::vector<int32_t> ids;
  model.encode_piece(std::string(1 << 20, 'a'), ids);  // 1 MiB of one letter
  EXPECT_EQ(ids.size(), size_t(1 << 19));
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacter) {
  EXPECT_EQ(sanitize_utf8("ok\xff\xfe!"), "ok\xef\xbf\xbd\xef\xbf\xbd!");
  EXPECT_EQ(sanitize_utf8("\xe4\xb8"), "\xef\xbf\xbd\xef\xbf\xbd");                  // truncated 3-byte char
  EXPECT_EQ(sanitize_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");                  // overlong '/'
  EXPECT_EQ(sanitize_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(sanitize_utf8("é中😀"), "é中😀");
}

}  // namespace
}  // namespace mlaserve
