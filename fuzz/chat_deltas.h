// What the chat-output fuzz targets share: an input's text cut into pieces at the lengths its
// leading bytes give, and whether two parses produced the same deltas.
#pragma once
#include <string_view>
#include <vector>

#include "fuzz_input.h"
#include "server/chat_output.h"

namespace mlaserve::fuzz {

// One byte for the number of piece lengths, one byte per length, then the text, cut cyclically.
inline std::vector<std::string_view> cut_into_pieces(InputReader& input) {
  std::vector<size_t> lengths(input.byte() % 16);
  for (auto& length : lengths) length = 1 + input.byte() % 8;
  const std::string_view text = input.rest();
  std::vector<std::string_view> pieces;
  size_t at = 0;
  for (size_t i = 0; at < text.size(); ++i) {
    const size_t length = lengths.empty() ? 1 : lengths[i % lengths.size()];
    pieces.push_back(text.substr(at, length));
    at += length;
  }
  return pieces;
}

// The deltas of `pieces` fed one by one to a parser (feed, finish), merged.
template <class Parser>
ChatDelta parse_pieces(Parser& parser, const std::vector<std::string_view>& pieces) {
  ChatDelta merged;
  for (const auto piece : pieces) merged.append(parser.feed(piece));
  merged.append(parser.finish());
  return merged;
}

inline bool same(const ChatDelta& a, const ChatDelta& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const auto &x = a.tool_calls[i], &y = b.tool_calls[i];
    if (x.index != y.index || x.id != y.id || x.name != y.name || x.arguments != y.arguments) return false;
  }
  return true;
}

}  // namespace mlaserve::fuzz
