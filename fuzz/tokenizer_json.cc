// tokenizer.json: any JSON gives a tokenizer, an Error, or a JSON type or key error (which
// Tokenizer::load reports as an Error naming the file); a tokenizer it gives encodes and decodes.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_input.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto tokenizer_json = nlohmann::json::parse(data, data + size, nullptr, false);
  if (tokenizer_json.is_discarded()) return 0;
  try {
    const auto tokenizer = mlaserve::Tokenizer::from_hf_json(tokenizer_json, nlohmann::json::object());
    const auto ids = tokenizer->encode("Hello, world! 123 héllo\n\t<s> ünï 中文", true);
    tokenizer->decode(ids, false);
  } catch (const mlaserve::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}
