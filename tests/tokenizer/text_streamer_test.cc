// TextStreamer holds back the bytes of a character a token leaves unfinished, so every chunk
// it emits is valid UTF-8 and the chunks add up to the decoded text.
#include "tokenizer/text_streamer.h"

#include <gtest/gtest.h>

#include "base/error.h"
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

// The text before the first stop string, whatever the pieces: cut in two at every byte, and
// one byte at a time. What each push returns never holds part of a stop string: the returned
// text, plus what is held, is always the text so far.
struct StopCase {
  std::string text;
  std::vector<std::string> stops;
  std::string want;  // the text sent
  bool stopped;
  std::string matched;  // the stop string found
};

std::vector<std::string> pieces_of(const std::string& text, size_t cut) {
  return {text.substr(0, cut), text.substr(cut)};
}

TEST(StopStringFilter, SendsTheTextBeforeTheFirstStopHoweverItIsCut) {
  const StopCase cases[] = {
      {"Hello STOP world", {"STOP"}, "Hello ", true, "STOP"},
      {"Hello STO", {"STOP"}, "Hello STO", false, ""},           // a prefix at the end is sent by flush
      {"one two three", {"three", "two"}, "one ", true, "two"},  // the earliest match wins
      {"aaab", {"aab"}, "a", true, "aab"},                       // overlapping starts
      {"\n\nUser:", {"\nUser:"}, "\n", true, "\nUser:"},
      {"no stop here", {}, "no stop here", false, ""},
  };
  for (const StopCase& c : cases) {
    std::vector<std::vector<std::string>> cuttings;
    for (size_t cut = 0; cut <= c.text.size(); ++cut) cuttings.push_back(pieces_of(c.text, cut));
    std::vector<std::string> bytes;
    for (char byte : c.text) bytes.emplace_back(1, byte);
    cuttings.push_back(bytes);
    for (const auto& pieces : cuttings) {
      StopStringFilter filter(c.stops);
      std::string sent, seen;
      for (const std::string& piece : pieces) {
        if (filter.stopped()) break;
        seen += piece;
        sent += filter.push(piece);
        for (const std::string& stop : c.stops) {
          if (!filter.stopped()) {
            EXPECT_EQ(sent.find(stop), std::string::npos) << c.text;
          }
        }
      }
      if (!filter.stopped()) sent += filter.flush();
      EXPECT_EQ(sent, c.want) << c.text << ", " << pieces.size() << " pieces";
      EXPECT_EQ(filter.stopped(), c.stopped) << c.text;
      EXPECT_EQ(filter.matched(), c.matched) << c.text;
    }
  }
}

// Text that could begin a stop string is held until the next piece decides it.
TEST(StopStringFilter, HoldsOnlyWhatCouldBeginAStop) {
  StopStringFilter filter({"</end>"});
  EXPECT_EQ(filter.push("abc</e"), "abc");
  EXPECT_EQ(filter.push("x"), "</ex");
  EXPECT_EQ(filter.push("</en"), "");
  EXPECT_EQ(filter.push("d>tail"), "");
  EXPECT_TRUE(filter.stopped());
  EXPECT_THROW(filter.push("more"), Error);
}

}  // namespace
}  // namespace mlaserve
