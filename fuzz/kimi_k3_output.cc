// Kimi K3's XTML output streamed through its parser (server/kimi_k3_output.h) in arbitrary pieces:
// however the text is cut, the merged deltas are those of the text fed whole.
#include "chat_deltas.h"
#include "server/kimi_k3_output.h"

namespace {

struct Options {
  mlaserve::KimiK3Opened opened;
  bool reasoning, calls;
};

mlaserve::ChatDelta parse(const Options& options, const std::vector<std::string_view>& pieces) {
  mlaserve::KimiK3OutputParser parser(options.opened, options.reasoning, options.calls);
  return mlaserve::fuzz::parse_pieces(parser, pieces);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mlaserve::fuzz::InputReader input(data, size);
  const uint8_t options = input.byte();
  const Options parser{mlaserve::KimiK3Opened((options & 3) % 3), bool(options & 4), bool(options & 8)};
  const std::vector<std::string_view> pieces = mlaserve::fuzz::cut_into_pieces(input);
  if (!mlaserve::fuzz::same(parse(parser, {input.rest()}), parse(parser, pieces))) __builtin_trap();
  return 0;
}
