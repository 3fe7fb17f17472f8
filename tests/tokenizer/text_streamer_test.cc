// TextStreamer holds back the bytes of a character a token leaves unfinished, so every chunk
// it emits is valid UTF-8 and the chunks add up to the decoded text.
#include "tokenizer/text_streamer.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

bool valid_utf8(const std::string& text) { return sanitize_utf8(text) == text; }

class TextStreamerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_model(dir_.path(), testing::micro_config(), StorageDType::BF16, 1);
    tokenizer_ = Tokenizer::load(dir_.path());
  }
  testing::TempDir dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(TextStreamerTest, EveryChunkIsWholeCharactersAndTheyAddUp) {
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac\xe2\x82\xac \xf0\x9f\x99\x82 na\xc3\xafve";  // é € € 🙂 ï
  const std::vector<int32_t> ids = tokenizer_->encode(text, false);
  int split_characters = 0;  // tokens that alone decode to part of a character
  for (int32_t id : ids) split_characters += !valid_utf8(tokenizer_->decode(std::span(&id, 1)));
  ASSERT_GT(split_characters, 0) << "the text must exercise the hold-back";
  TextStreamer streamer(*tokenizer_);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string chunk = streamer.push(id);
    EXPECT_TRUE(valid_utf8(chunk)) << "chunk after id " << id;
    streamed += chunk;
  }
  streamed += streamer.finish();
  EXPECT_EQ(streamed, text);
}

TEST_F(TextStreamerTest, AnUnfinishedCharacterEndsAsReplacement) {
  const std::vector<int32_t> ids = tokenizer_->encode("\xe2\x82\xac", false);
  int32_t lead = -1;  // a token that decodes to a lead byte, or a lead and not all of the rest
  for (int32_t id : ids)
    if (!valid_utf8(tokenizer_->decode(std::span(&id, 1)))) {
      lead = id;
      break;
    }
  ASSERT_GE(lead, 0);
  TextStreamer streamer(*tokenizer_);
  EXPECT_EQ(streamer.push(lead), "");
  EXPECT_EQ(streamer.finish(), "\xef\xbf\xbd");  // U+FFFD
  EXPECT_EQ(streamer.finish(), "");
}

}  // namespace
}  // namespace mlaserve
