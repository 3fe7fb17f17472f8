// JSON grammars on their own: which texts the matcher accepts whole (valid JSON, valid under the
// schema), the keywords refused by name, and the token masks of the vocabulary-trie walk
// against trying every token one by one.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <random>

#include "base/error.h"
#include "grammar/matcher.h"

namespace mlaserve::grammar {
namespace {

using ojson = nlohmann::ordered_json;

// Every single byte is a token, and id 256 ends the sequence.
std::shared_ptr<const Vocabulary> byte_vocabulary() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  tokens.push_back("");
  return std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{256});
}

// "whole": accepted and complete; "prefix": accepted, not complete; "refused".
std::string verdict(const Grammar& grammar, const std::string& text) {
  Matcher matcher(std::make_shared<const Grammar>(grammar), byte_vocabulary());
  if (!matcher.accept_bytes(text)) return "refused";
  return matcher.is_complete() ? "whole" : "prefix";
}

TEST(JsonGrammar, AnyObject) {
  const Grammar grammar = json_object_grammar();
  for (const char* text : {"{}", "{\"a\": 1}", "{ }", "{\"a\": [1, 2.5e3, -0.25, \"x\\u00e9\\n\", \"é€😀\", true, null, {\"b\": {}}]}",
                           "{\n  \"k\": \"v\"\n}"})
    EXPECT_EQ(verdict(grammar, text), "whole") << text;
  for (const char* text : {"[1]", "{\"a\":}", "{\"a\": 1,}", "{'a': 1}", "{\"a\": 01}", "{\"a\": \"\x01\"}", "{\"a\": tru}",
                           "{\"a\": \"\xc3\"}", "{\"a\": 1}}", " {}", "{\"a\": \"\xe0\x80\x80\"}", "{\"a\": \"\xed\xa0\x80\"}",
                           "{\"a\": \"\xf4\x90\x80\x80\"}", "{\"a\": \"\xc0\xaf\"}"})
    EXPECT_EQ(verdict(grammar, text), "refused") << text;
  EXPECT_EQ(verdict(grammar, "{\"a\": [1, {\"b\""), "prefix");
}

TEST(JsonGrammar, PropertiesInOrderWithTheRequiredOnes) {
  const Grammar grammar = json_schema_grammar(ojson::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 5}, "age": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["name"]})"));
  for (const char* text : {R"({"name": "Ann"})", R"({"name": "Ann", "age": 3})", R"({"name":"Ann","tags":["a","b"]})",
                           R"({"name": "", "age": 0, "tags": []})"})
    EXPECT_EQ(verdict(grammar, text), "whole") << text;
  for (const char* text : {R"({"age": 3})", R"({"name": "toolong"})", R"({"name": "A", "age": -1})",
                           R"({"name": "A", "tags": ["a", "b", "a"]})", R"({"name": "A", "extra": 1})",
                           R"({"name": "A", "age": 1.5})", R"({"name": "A", "tags": ["c"]})", R"({"name": "A",, "age": 1})"})
    EXPECT_EQ(verdict(grammar, text), "refused") << text;
  EXPECT_EQ(verdict(grammar, R"({"name": "A")"), "prefix");
}

TEST(JsonGrammar, RefsAlternativesConstantsAndNull) {
  const Grammar tree = json_schema_grammar(ojson::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {
      "type": "object", "properties": {"value": {"anyOf": [{"type": "number"}, {"const": "leaf"}]},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}})"));
  EXPECT_EQ(verdict(tree, R"({"value": 1, "children": [{"value": "leaf"}, {"value": -2e5, "children": []}]})"), "whole");
  EXPECT_EQ(verdict(tree, R"({"value": "tree"})"), "refused");
  const Grammar nullable = json_schema_grammar(ojson::parse(R"({"type": ["string", "null"]})"));
  EXPECT_EQ(verdict(nullable, "null"), "whole");
  EXPECT_EQ(verdict(nullable, "\"x\""), "whole");
  EXPECT_EQ(verdict(nullable, "1"), "refused");
  const Grammar counted = json_schema_grammar(ojson::parse(R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2})"));
  EXPECT_EQ(verdict(counted, "[true]"), "refused");
  EXPECT_EQ(verdict(counted, "[true, false, true]"), "whole");
}

TEST(JsonGrammar, ChoicesAreMatchedWhole) {
  const Grammar choice = choice_grammar({"yes", "no", "not sure"});
  EXPECT_EQ(verdict(choice, "yes"), "whole");
  EXPECT_EQ(verdict(choice, "not sure"), "whole");
  EXPECT_EQ(verdict(choice, "no"), "whole");
  EXPECT_EQ(verdict(choice, "not"), "prefix");
  EXPECT_EQ(verdict(choice, "yess"), "refused");
  EXPECT_EQ(verdict(choice, "\"yes\""), "refused");
  EXPECT_THROW(choice_grammar({}), Error);
}

TEST(JsonGrammar, UnsupportedKeywordsAreNamed) {
  for (const char* schema : {R"({"type": "string", "pattern": "^a"})", R"({"properties": {"x": {"type": "integer", "maximum": 3}}})",
                             R"({"$ref": "#/$defs/missing"})", R"({"type": "thing"})"}) {
    try {
      json_schema_grammar(ojson::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("JSON schema at #"), std::string::npos) << message;
    }
  }
  // Bounds unrolled past the cap, and keyword values of the wrong type, are errors too.
  for (const char* schema : {R"({"type": "string", "maxLength": 1000000})", R"({"type": "string", "maxLength": "5"})",
                             R"({"type": "array", "maxItems": 1e21})", R"({"type": "array", "minItems": -1})",
                             R"({"type": "string", "minLength": 2.5})", R"({"type": 5})", R"({"properties": 5})"})
    EXPECT_THROW(json_schema_grammar(ojson::parse(schema)), Error) << schema;
  // A $ref cycle that reads nothing between its turns has no text to match: refused by the rule.
  for (const char* schema : {R"({"$ref": "#"})", R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
                             R"({"$defs": {"node": {"type": "object"}}, "$ref": "#"})"}) {
    try {
      json_schema_grammar(ojson::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rule 'ref #"), std::string::npos) << e.what();
    }
  }
}

// Each character of JSON's alphabet (as a byte-level BPE vocabulary has every byte), then tokens
// of a few of them, and some beyond.
std::vector<std::string> random_tokens(std::mt19937& rng, int count) {
  const std::string alphabet = "{}[]\":, \n0123456789.-eEtrufalsn\\abcxyz";
  std::vector<std::string> tokens = {"{\"", "\":", "\": ", "\",", "\"}", "}}", "]}", "true", "false", "null", ", \"", "é", "\xe2\x82",
                                     "\xac", "d\": \"", "long words ", "letters and spaces", "\\u00e9", "\\n"};
  for (char c : alphabet) tokens.push_back(std::string(1, c));
  std::uniform_int_distribution<int> length(2, 4), pick(0, int(alphabet.size()) - 1);
  while (int(tokens.size()) < count) {
    std::string token;
    for (int i = length(rng); i > 0; --i) token += alphabet[size_t(pick(rng))];
    tokens.push_back(token);
  }
  tokens.push_back("");  // a special token: never allowed
  tokens.push_back("");  // end of sequence
  return tokens;
}

// Walks random allowed tokens to the end, checking at every step that the trie walk's mask is
// exactly the tokens a fresh matcher accepts after the text so far; the text must parse.
TEST(JsonGrammar, TokenMasksEqualTryingEveryToken) {
  const auto grammar = std::make_shared<const Grammar>(json_schema_grammar(ojson::parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3},
      "c": {"enum": [true, null]}, "d": {"type": "string", "maxLength": 40}}, "required": ["a", "c"]})")));
  int finished = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> tokens = random_tokens(rng, 400);
    const int32_t eos = int32_t(tokens.size()) - 1;
    const auto vocabulary = std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{eos});
    Matcher matcher(grammar, vocabulary);
    std::string text;
    for (int step = 0; step < 200; ++step) {
      const TokenBitmask& mask = matcher.allowed_tokens();
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < int32_t(tokens.size()); ++id) {
        Matcher fresh(grammar, vocabulary);
        const bool expected = fresh.accept_bytes(text) && fresh.accept_token(id);
        const bool got = (mask[size_t(id) / 64] >> (id % 64)) & 1;
        ASSERT_EQ(got, expected) << "seed " << seed << " after '" << text << "' token '" << tokens[size_t(id)] << "'";
        if (got) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty()) << "seed " << seed << " after '" << text << "'";
      const int32_t token = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      if (token == eos) break;
      ASSERT_TRUE(matcher.accept_token(token));
      text += tokens[size_t(token)];
    }
    if (matcher.is_complete()) {
      ++finished;
      const ojson document = ojson::parse(text);
      EXPECT_TRUE(document.contains("a") && document["a"].is_number_integer()) << text;
      EXPECT_TRUE(document.contains("c")) << text;
    }
  }
  EXPECT_GE(finished, 4);  // most walks reach the end of sequence within 200 tokens
}

}  // namespace
}  // namespace mlaserve::grammar
