// Turns a stream of token ids into text, holding back the bytes of an unfinished UTF-8
// character so that every emitted chunk is valid UTF-8.
#pragma once
#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace mlaserve {

class TextStreamer {
 public:
  explicit TextStreamer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  std::string push(int32_t id);  // text that became complete with this token
  std::string finish();          // whatever is left (invalid tails become U+FFFD)

 private:
  const Tokenizer& tokenizer_;
  std::string pending_;
};

}  // namespace mlaserve
