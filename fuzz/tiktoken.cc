// A tiktoken rank file ("base64 rank" lines) with Kimi's split pattern: a tokenizer or an Error;
// a tokenizer it gives encodes and decodes text.
#include "base/error.h"
#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string ranks(reinterpret_cast<const char*>(data), size);
  try {
    const auto tokenizer =
        mlaserve::Tokenizer::from_tiktoken(ranks, mlaserve::kKimiPattern, {{"<|im_end|>", 4, true}}, 3);
    const auto ids = tokenizer->encode("Hello, world! 123 héllo\n\t<|im_end|> ünï 中文", true);
    tokenizer->decode(ids, false);
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
