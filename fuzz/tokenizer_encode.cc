// Encoding arbitrary bytes with the committed models/kjv tokenizer (byte-level BPE): valid UTF-8
// decodes back to itself (added tokens encoded as plain text); any text encodes to known ids; arbitrary ids decode
// without reading outside it.
#include <cstring>
#include <vector>

#include "base/error.h"
#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

namespace {

bool valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = uint8_t(text[i]);
    const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? lead : lead & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      if ((uint8_t(text[i + k]) >> 6) != 2) return false;
      code = code << 6 | (uint8_t(text[i + k]) & 0x3f);
    }
    static constexpr uint32_t kSmallest[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[length] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += length;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizer = mlaserve::Tokenizer::load(mlaserve::fuzz::models_dir() + "/kjv");
  mlaserve::fuzz::InputReader input(data, size);
  const bool parse_special = input.byte() & 1;
  const std::string_view text = input.rest();
  const std::vector<int32_t> ids = tokenizer->encode(text, parse_special);
  for (const int32_t id : ids)  // decode skips unknown ids
    if (tokenizer->decode(std::span(&id, 1), false).empty()) __builtin_trap();
  if (!parse_special && valid_utf8(text) && tokenizer->decode(ids, false) != text) __builtin_trap();
  std::vector<int32_t> arbitrary(text.size() / 4);
  if (!arbitrary.empty()) std::memcpy(arbitrary.data(), text.data(), arbitrary.size() * 4);
  tokenizer->decode(arbitrary, input.byte() & 1);
  return 0;
}
