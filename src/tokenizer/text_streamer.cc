#include "tokenizer/text_streamer.h"

#include <algorithm>
#include <utility>

#include "base/error.h"

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
    for (size_t length = std::min(pattern.size() - std::min<size_t>(pattern.size(), 1), text.size()); length > longest;
         --length)
      if (text.substr(text.size() - length) == std::string_view(pattern).substr(0, length)) {
        longest = length;
        break;
      }
  return longest;
}

std::string StopStringFilter::push(std::string_view text) {
  MLA_CHECK(!stopped_, "text pushed after a stop string");
  held_ += text;
  size_t stop_at = std::string::npos;
  for (const auto& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at < stop_at) stop_at = at, matched_ = stop;
  }
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string before = held_.substr(0, stop_at);
    held_.clear();
    return before;
  }
  const size_t send = held_.size() - partial_match_length(held_, stops_);
  std::string sent = held_.substr(0, send);
  held_.erase(0, send);
  return sent;
}

std::string StopStringFilter::flush() { return std::exchange(held_, std::string()); }

std::string TextStreamer::finish() {
  std::string rest = sanitize_utf8(pending_);
  pending_.clear();
  return rest;
}

}  // namespace mlaserve
