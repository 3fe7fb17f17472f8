// Chat output streamed through the reasoning and tool-call parsers in arbitrary pieces: however
// the text is cut, the merged deltas are those of the text fed whole.
#include <optional>

#include "chat_deltas.h"

namespace {

struct Options {
  bool reasoning, opened_in_prompt;
  std::optional<mlaserve::ToolCallFormat> tools;
};

mlaserve::ChatDelta parse(const Options& options, const std::vector<std::string_view>& pieces) {
  mlaserve::ChatOutputParser parser(mlaserve::ChatParsing{options.tools, options.reasoning},
                                    options.opened_in_prompt ? "<think>" : "");
  return mlaserve::fuzz::parse_pieces(parser, pieces);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mlaserve::fuzz::InputReader input(data, size);
  const uint8_t options = input.byte();
  const uint8_t format = options & 3;
  const Options parser{bool(options & 4), bool(options & 8),
                       format == 3 ? std::nullopt : std::optional(mlaserve::ToolCallFormat(format))};
  const std::vector<std::string_view> pieces = mlaserve::fuzz::cut_into_pieces(input);
  if (!mlaserve::fuzz::same(parse(parser, {input.rest()}), parse(parser, pieces))) __builtin_trap();
  return 0;
}
