// Kimi K3's constrained output (grammar/kimi_k3_grammar.h): which XTML texts the matcher accepts
// whole, with markers spelled as special tokens; and, over a vocabulary holding both a marker
// token and ordinary tokens that spell its text, that only the marker token is allowed.
#include "grammar/kimi_k3_grammar.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "grammar/matcher.h"

namespace mlaserve::grammar {
namespace {

using ojson = nlohmann::ordered_json;

std::shared_ptr<const Vocabulary> single_bytes() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.push_back("");
  return std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{256});
}

// K3's output text with each marker spelled as grammars spell the special token.
std::string spelled(std::string text) {
  for (const char* marker : {"<|open|>", "<|close|>", "<|sep|>"}) {
    for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 2))
      text.replace(at, std::string(marker).size(), special_token_spelling(marker));
  }
  return text;
}

std::string k3_verdict(const Grammar& grammar, const std::string& text) {
  Matcher matcher(std::make_shared<const Grammar>(grammar), single_bytes());
  if (!matcher.accept_bytes(spelled(text))) return "refused";
  return matcher.is_complete() ? "whole" : "prefix";
}

const ojson kWeather = ojson::parse(R"({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city", "days"], "properties": {
      "city": {"type": "string", "maxLength": 6}, "days": {"type": "integer", "minimum": 1},
      "unit": {"enum": ["C", "F"]}, "tags": {"type": "array", "items": {"type": "string"}},
      "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}})");
const ojson kNow = ojson::parse(R"({"type": "function", "function": {"name": "now"}})");

const std::string kCity = "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris<|close|>argument<|sep|>";
const std::string kDays = "<|open|>argument key=\"days\" type=\"number\"<|sep|>3<|close|>argument<|sep|>";
const std::string kTail = "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>";

std::string call(const std::string& arguments, const std::string& name = "get_weather", int index = 1) {
  return "<|open|>call tool=\"" + name + "\" index=\"" + std::to_string(index) + "\"<|sep|>" + arguments;
}

TEST(KimiK3Grammar, ANamedCallAfterAnEmptyResponse) {
  const Grammar grammar = kimi_k3_grammar({KimiK3Opened::Response, std::nullopt, ojson::array({kWeather}), true, true});
  const std::string head = "<|close|>response<|sep|><|open|>tools<|sep|>";
  for (const std::string& arguments :
       {kCity + kDays, kCity + kDays + "<|open|>argument key=\"unit\" type=\"string\"<|sep|>F<|close|>argument<|sep|>",
        kCity + kDays + "<|open|>argument key=\"tags\" type=\"array\"<|sep|>[\"a\", \"b\"]<|close|>argument<|sep|>",
        kCity + kDays + "<|open|>argument key=\"note\" type=\"null\"<|sep|>null<|close|>argument<|sep|>",
        kCity + kDays + "<|open|>argument key=\"note\" type=\"string\"<|sep|>a < b | c<|close|>argument<|sep|>"})
    EXPECT_EQ(k3_verdict(grammar, head + call(arguments) + kTail), "whole") << arguments;
  for (const std::string& text :
       {head + call(kCity) + kTail,                      // a required argument missing
        head + call(kDays + kCity) + kTail,              // out of the schema's order
        head + call(kCity + kDays, "get_time") + kTail,  // another tool
        "Sure.<|close|>response<|sep|><|open|>tools<|sep|>" + call(kCity + kDays) + kTail,  // text first
        head +
            call("<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris, France<|close|>argument<|sep|>" + kDays) +
            kTail,
        head + call(kCity + "<|open|>argument key=\"days\" type=\"number\"<|sep|>0<|close|>argument<|sep|>") + kTail,
        head + call(kCity + kDays + "<|open|>argument key=\"unit\" type=\"string\"<|sep|>K<|close|>argument<|sep|>") +
            kTail,
        head +
            call(kCity + kDays + "<|open|>argument key=\"note\" type=\"string\"<|sep|>a<|b<|close|>argument<|sep|>") +
            kTail,
        head + call(kCity + kDays) + "<|close|>call<|sep|>" + call(kCity + kDays, "get_weather", 2) +
            kTail})  // two calls
    EXPECT_EQ(k3_verdict(grammar, text), "refused") << text;
  EXPECT_EQ(k3_verdict(grammar, head + call(kCity)), "prefix");
}

TEST(KimiK3Grammar, RequiredCallsAfterThinking) {
  const Grammar grammar =
      kimi_k3_grammar({KimiK3Opened::Think, std::nullopt, ojson::array({kWeather, kNow}), false, false});
  const std::string answer =
      "Let me look.<|close|>think<|sep|><|open|>response<|sep|>One moment.<|close|>response<|sep|>"
      "<|open|>tools<|sep|>";
  EXPECT_EQ(k3_verdict(grammar, answer + call("", "now") + kTail), "whole");
  EXPECT_EQ(k3_verdict(grammar, answer + call(kCity + kDays) + "<|close|>call<|sep|>" + call("", "now", 2) + kTail),
            "whole");
  EXPECT_EQ(k3_verdict(grammar, answer + "<|close|>tools<|sep|><|close|>message<|sep|>"), "refused");  // no call
  EXPECT_EQ(k3_verdict(grammar,
                       "Let me look.<|close|>think<|sep|><|open|>response<|sep|>Done.<|close|>response<|sep|>"
                       "<|close|>message<|sep|>"),
            "refused");
  EXPECT_EQ(k3_verdict(grammar, "x<|close|>think<|sep|><|open|>response<|sep|>" + std::string(257, 'a')), "refused");
  // One call only, without parallel calls.
  const Grammar one = kimi_k3_grammar({KimiK3Opened::Think, std::nullopt, ojson::array({kWeather, kNow}), true, false});
  EXPECT_EQ(k3_verdict(one, answer + call(kCity + kDays) + "<|close|>call<|sep|>" + call("", "now", 2) + kTail),
            "refused");
}

TEST(KimiK3Grammar, AJsonResponse) {
  const ojson schema =
      ojson::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})");
  const Grammar grammar = kimi_k3_grammar({KimiK3Opened::Think, schema});
  EXPECT_EQ(k3_verdict(grammar,
                       "Easy.<|close|>think<|sep|><|open|>response<|sep|>{\"ok\": true}<|close|>response<|sep|>"
                       "<|close|>message<|sep|>"),
            "whole");
  EXPECT_EQ(k3_verdict(grammar, "Easy.<|close|>think<|sep|><|open|>response<|sep|>{\"ok\": 1}"), "refused");
  // The think channel cannot hold a marker's text, or the parser would end it there.
  EXPECT_EQ(k3_verdict(grammar, "Easy <|close|>think<|sep|> x"), "refused");
  EXPECT_EQ(k3_verdict(grammar, "a <| b<|close|>think<|sep|>"), "refused");
  const Grammar any_object = kimi_k3_grammar({KimiK3Opened::Message, ojson()});
  EXPECT_EQ(k3_verdict(any_object, "<|open|>response<|sep|>{}<|close|>response<|sep|><|close|>message<|sep|>"),
            "whole");
  EXPECT_EQ(k3_verdict(any_object,
                       "<|open|>think<|sep|>Hm<|close|>think<|sep|><|open|>response<|sep|>{\"a\": 1}"
                       "<|close|>response<|sep|><|close|>message<|sep|>"),
            "whole");
}

// A marker token (special, spelled with 0xFF) is allowed; ordinary tokens spelling its text are not.
TEST(KimiK3Grammar, OnlyTheMarkerTokenIsAllowed) {
  const Grammar grammar = kimi_k3_grammar({KimiK3Opened::Response, std::nullopt, ojson::array({kNow}), true, true});
  std::vector<std::string> tokens = {
      special_token_spelling("<|close|>"), "<|close|>", "<|", "close", "|>", "<", "", "x"};
  const Vocabulary vocabulary(tokens, {6});
  Matcher matcher(std::make_shared<const Grammar>(grammar),
                  std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{6}));
  const TokenBitmask& allowed = matcher.allowed_tokens();
  std::vector<int> ids;
  for (int id = 0; id < int(tokens.size()); ++id)
    if (allowed[size_t(id / 64)] >> (id % 64) & 1) ids.push_back(id);
  EXPECT_EQ(ids, std::vector<int>({0}));
}

TEST(KimiK3Grammar, SchemasItCannotWriteAreNamed) {
  const ojson tool = ojson::parse(R"({"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"n": {"type": "number", "multipleOf": 3}}}}})");
  try {
    kimi_k3_grammar({KimiK3Opened::Response, std::nullopt, ojson::array({tool}), true, true});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("multipleOf"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mlaserve::grammar
