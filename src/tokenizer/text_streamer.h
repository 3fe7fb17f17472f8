// Turns a stream of token ids into text, holding back the bytes of an unfinished UTF-8
// character so that every emitted chunk is valid UTF-8.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mlaserve {

class TextStreamer {
 public:
  // skip_special: special tokens add no text.
  explicit TextStreamer(const Tokenizer& tokenizer, bool skip_special = true)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string finish();          // whatever is left (invalid tails become U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `patterns`: text a
// stream holds back because the next piece may complete a pattern (a stop string, a marker).
size_t partial_match_length(std::string_view text, const std::vector<std::string>& patterns);

// A stream's text up to its first stop string (the API's `stop`): push() returns what can be
// sent now, holding back a suffix that may begin a stop string; once one appears, the text
// before it is the last returned and stopped() is true. The returned pieces add up to the text
// before the first stop string, however the stream is cut.
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  std::string push(std::string_view text);
  std::string flush();  // the held text, when the stream ends for another reason
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string found, once stopped

 private:
  std::vector<std::string> stops_;
  std::string held_, matched_;
  bool stopped_ = false;
};

}  // namespace mlaserve
