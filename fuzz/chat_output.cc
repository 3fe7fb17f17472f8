// Chat output streamed through the reasoning and tool-call parsers in arbitrary pieces: however
// the text is cut, the merged deltas are those of the text fed whole.
#include <optional>
#include <vector>

#include "fuzz_input.h"
#include "server/chat_output.h"

namespace {

using mlaserve::ChatDelta;

struct Options {
  bool reasoning, opened_in_prompt;
  std::optional<mlaserve::ToolCallFormat> tools;
};

ChatDelta parse(const Options& options, const std::vector<std::string_view>& pieces) {
  mlaserve::ChatOutputParser parser(options.reasoning, options.opened_in_prompt, options.tools);
  ChatDelta merged;
  for (const auto piece : pieces) merged.append(parser.feed(piece));
  merged.append(parser.finish());
  return merged;
}

bool same(const ChatDelta& a, const ChatDelta& b) {
  if (a.reasoning != b.reasoning || a.content != b.content || a.tool_calls.size() != b.tool_calls.size()) return false;
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const auto &x = a.tool_calls[i], &y = b.tool_calls[i];
    if (x.index != y.index || x.id != y.id || x.name != y.name || x.arguments != y.arguments) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mlaserve::fuzz::InputReader input(data, size);
  const uint8_t options = input.byte();
  const uint8_t format = options & 3;
  const Options parser{bool(options & 4), bool(options & 8),
                       format == 3 ? std::nullopt : std::optional(mlaserve::ToolCallFormat(format))};
  // The cut points: one length byte per piece, then the text.
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
  if (!same(parse(parser, {text}), parse(parser, pieces))) __builtin_trap();
  return 0;
}
