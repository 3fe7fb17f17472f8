#include "tokenizer/text_streamer.h"

#include <algorithm>

namespace mlaserve {
namespace {

// Length of the longest prefix of `bytes` that does not end inside a UTF-8 character.
size_t complete_utf8_prefix(const std::string& bytes) {
  size_t end = bytes.size();
  for (size_t back = 1; back <= std::min<size_t>(3, bytes.size()); ++back) {
    const uint8_t byte = uint8_t(bytes[bytes.size() - back]);
    if ((byte & 0xc0) == 0x80) continue;  // continuation byte: look further back
    const size_t length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    if (length > back) end = bytes.size() - back;  // a lead byte still waiting for the rest
    break;
  }
  return end;
}

}  // namespace

std::string TextStreamer::push(int32_t id) {
  pending_ += tokenizer_.decode(std::span(&id, 1), skip_special_);
  const size_t complete = complete_utf8_prefix(pending_);
  std::string ready = sanitize_utf8(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return ready;
}

size_t partial_match_length(std::string_view text, const std::vector<std::string>& patterns) {
  size_t longest = 0;
  for (const auto& pattern : patterns)
    for (size_t length = std::min(pattern.size() - std::min<size_t>(pattern.size(), 1), text.size()); length > longest; --length)
      if (text.substr(text.size() - length) == std::string_view(pattern).substr(0, length)) {
        longest = length;
        break;
      }
  return longest;
}

std::string TextStreamer::finish() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace mlaserve
