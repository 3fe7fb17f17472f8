// A response_format / tool-parameters JSON Schema: a grammar or an Error naming the keyword; a
// grammar it gives drives a token matcher (masks over a byte vocabulary, a few JSON texts fed).
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_input.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace {

std::shared_ptr<const mlaserve::grammar::Vocabulary> byte_vocabulary() {
  std::vector<std::string> token_bytes;
  for (int byte = 0; byte < 256; ++byte) token_bytes.emplace_back(1, char(byte));
  token_bytes.emplace_back("\": ");
  token_bytes.emplace_back("");  // the end of text
  return std::make_shared<const mlaserve::grammar::Vocabulary>(token_bytes, std::vector<int32_t>{257});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto vocabulary = byte_vocabulary();
  const auto schema = nlohmann::ordered_json::parse(data, data + size, nullptr, false);
  if (schema.is_discarded()) return 0;
  std::shared_ptr<const mlaserve::grammar::Grammar> grammar;
  try {
    grammar = std::make_shared<const mlaserve::grammar::Grammar>(mlaserve::grammar::json_schema_grammar(schema));
  } catch (const mlaserve::Error&) {
    return 0;
  }
  for (const char* text : {"{\"a\": 1}", "\"x\"", "[1, 2]", "-0.5e3", "null"}) {
    mlaserve::grammar::Matcher matcher(grammar, vocabulary);
    matcher.allowed_tokens();
    if (matcher.accept_bytes(text)) matcher.allowed_tokens();
  }
  return 0;
}
