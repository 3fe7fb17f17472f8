// JSON grammars on their own: which texts the matcher accepts whole (valid JSON, valid under the
// schema), the keywords refused by name, and the token masks of the vocabulary-trie walk
// against trying every token one by one.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <functional>
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
  for (const char* text :
       {"{}", "{\"a\": 1}", "{ }", "{\"a\": [1, 2.5e3, -0.25, \"x\\u00e9\\n\", \"é€😀\", true, null, {\"b\": {}}]}",
        "{\n  \"k\": \"v\"\n}"})
    EXPECT_EQ(verdict(grammar, text), "whole") << text;
  for (const char* text : {"[1]", "{\"a\":}", "{\"a\": 1,}", "{'a': 1}", "{\"a\": 01}", "{\"a\": \"\x01\"}",
                           "{\"a\": tru}", "{\"a\": \"\xc3\"}", "{\"a\": 1}}", " {}", "{\"a\": \"\xe0\x80\x80\"}",
                           "{\"a\": \"\xed\xa0\x80\"}", "{\"a\": \"\xf4\x90\x80\x80\"}", "{\"a\": \"\xc0\xaf\"}"})
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
  for (const char* text :
       {R"({"age": 3})", R"({"name": "toolong"})", R"({"name": "A", "age": -1})",
        R"({"name": "A", "tags": ["a", "b", "a"]})", R"({"name": "A", "extra": 1})", R"({"name": "A", "age": 1.5})",
        R"({"name": "A", "tags": ["c"]})", R"({"name": "A",, "age": 1})"})
    EXPECT_EQ(verdict(grammar, text), "refused") << text;
  EXPECT_EQ(verdict(grammar, R"({"name": "A")"), "prefix");
}

TEST(JsonGrammar, RefsAlternativesConstantsAndNull) {
  const Grammar tree = json_schema_grammar(ojson::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {
      "type": "object", "properties": {"value": {"anyOf": [{"type": "number"}, {"const": "leaf"}]},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"]}}})"));
  EXPECT_EQ(verdict(tree, R"({"value": 1, "children": [{"value": "leaf"}, {"value": -2e5, "children": []}]})"),
            "whole");
  EXPECT_EQ(verdict(tree, R"({"value": "tree"})"), "refused");
  const Grammar nullable = json_schema_grammar(ojson::parse(R"({"type": ["string", "null"]})"));
  EXPECT_EQ(verdict(nullable, "null"), "whole");
  EXPECT_EQ(verdict(nullable, "\"x\""), "whole");
  EXPECT_EQ(verdict(nullable, "1"), "refused");
  const Grammar counted =
      json_schema_grammar(ojson::parse(R"({"type": "array", "items": {"type": "boolean"}, "minItems": 2})"));
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
  for (const char* schema :
       {R"js({"type": "string", "pattern": "^(?=a)"})js",
        R"({"properties": {"x": {"type": "integer", "multipleOf": 3}}})", R"({"$ref": "#/$defs/missing"})",
        R"({"type": "thing"})", R"({"type": "integer", "minimum": 5, "maximum": 3})",
        R"js({"type": "string", "pattern": "(a)\\1"})js", R"({"allOf": [{"type": "string"}, {"type": "object"}]})"}) {
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
  for (const char* schema :
       {R"({"$ref": "#"})",
        R"({"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})",
        R"({"$defs": {"node": {"type": "object"}}, "$ref": "#"})"}) {
    try {
      json_schema_grammar(ojson::parse(schema));
      ADD_FAILURE() << "accepted " << schema;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rule 'ref #"), std::string::npos) << e.what();
    }
  }
}

// Every integer of -250..250 is written whole exactly when it lies within the bounds.
TEST(JsonGrammar, IntegerBoundsAreExact) {
  struct Case {
    const char* schema;
    std::function<bool(int)> inside;
  };
  const Case cases[] = {
      {R"({"type": "integer", "minimum": -17, "maximum": 123})", [](int v) { return v >= -17 && v <= 123; }},
      {R"({"type": "integer", "exclusiveMinimum": 0})", [](int v) { return v > 0; }},
      {R"({"type": "integer", "exclusiveMaximum": -9.5})", [](int v) { return v < -9.5; }},
      {R"({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 200})", [](int v) { return v >= 2 && v < 200; }},
      {R"({"type": "integer", "minimum": 7, "exclusiveMinimum": true, "maximum": 99})",
       [](int v) { return v > 7 && v <= 99; }},
      {R"({"type": "integer", "maximum": 0})", [](int v) { return v <= 0; }},
  };
  for (const Case& c : cases) {
    const Grammar grammar = json_schema_grammar(ojson::parse(c.schema));
    for (int v = -250; v <= 250; ++v) {  // outside: refused, or a prefix of a number inside ("1" of "10")
      const std::string got = verdict(grammar, std::to_string(v));
      ASSERT_TRUE(c.inside(v) ? got == "whole" : got != "whole") << c.schema << " " << v << ": " << got;
    }
    EXPECT_EQ(verdict(grammar, "-0"), "refused") << c.schema;
    EXPECT_EQ(verdict(grammar, "007"), "refused") << c.schema;
  }
  const Grammar up = json_schema_grammar(ojson::parse(R"({"type": "integer", "minimum": 5})"));
  EXPECT_EQ(verdict(up, "9999999999999999"), "whole");
  EXPECT_EQ(verdict(up, "99999999999999999"), "refused");  // 17 digits: past the bound
}

// Numbers written under bounds lie within them (any decimal text), and the ones inside that the
// grammar writes include the integers, fractions on whole units inside, and fractions within one
// unit.
TEST(JsonGrammar, NumberBoundsWriteOnlyNumbersInside) {
  struct Case {
    const char* schema;
    double low, high;
    bool low_open, high_open;
    std::vector<const char*> written;
  };
  const Case cases[] = {
      {R"({"type": "number", "minimum": 0, "maximum": 1})", 0, 1, false, false, {"0", "1", "0.5", "0.25"}},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})", 0, 1, true, true, {"0.5", "0.001"}},
      {R"({"type": "number", "minimum": 0.1, "maximum": 0.9})", 0.1, 0.9, false, false, {"0.10", "0.90", "0.55"}},
      {R"({"type": "number", "minimum": -2.5, "maximum": 3.25})",
       -2.5,
       3.25,
       false,
       false,
       {"-2", "3", "-1.75", "2.5"}},
      {R"({"type": "number", "minimum": -0.75, "maximum": -0.25})", -0.75, -0.25, false, false, {"-0.500", "-0.250"}},
      {R"({"type": "number", "exclusiveMinimum": 10})", 10, 1e300, true, false, {"11", "10.5", "1234.5678"}},
  };
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    const Grammar grammar = json_schema_grammar(ojson::parse(c.schema));
    for (const char* text : c.written) EXPECT_EQ(verdict(grammar, text), "whole") << c.schema << " " << text;
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text = rng() % 2 ? "-" : "";
      text += std::to_string(rng() % (trial % 3 == 0 ? 2000 : 5));
      if (rng() % 3) {
        text += ".";
        for (size_t digits = 1 + rng() % 4; digits-- > 0;) text += char('0' + rng() % 10);
      }
      const double value = std::stod(text);
      const bool inside =
          (c.low_open ? value > c.low : value >= c.low) && (c.high_open ? value < c.high : value <= c.high);
      if (!inside) {
        ASSERT_NE(verdict(grammar, text), "whole") << c.schema << " " << text;
      }
    }
  }
}

TEST(JsonGrammar, PatternsAndFormats) {
  const Grammar code =
      json_schema_grammar(ojson::parse(R"({"type": "string", "pattern": "^[a-z]{2,4}-\\d+(\\.(x|yz))?$"})"));
  for (const char* text : {R"("ab-12")", R"("abcd-0.yz")", R"("zz-9.x")"})
    EXPECT_EQ(verdict(code, text), "whole") << text;
  for (const char* text : {R"("a-1")", R"("abcde-1")", R"("ab-")", R"("AB-1")", R"("ab-1.y")"})
    EXPECT_EQ(verdict(code, text), "refused") << text;
  // Characters JSON escapes are written escaped; a negated class takes any other character.
  const Grammar quoted = json_schema_grammar(ojson::parse(R"({"type": "string", "pattern": "^\"[^\"]*\"\\\\\\n$"})"));
  EXPECT_EQ(verdict(quoted, R"("\"é x\"\\\n")"), "whole");
  EXPECT_EQ(verdict(quoted, R"("\"a\"b\"\\\n")"), "refused");
  EXPECT_EQ(verdict(quoted, "\"\"a\"\\\\\\n\""), "refused");  // a raw quote is not JSON
  // minLength/maxLength bound the pattern's repetitions.
  const Grammar bounded =
      json_schema_grammar(ojson::parse(R"({"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 3})"));
  for (const char* text : {R"("ab")", R"("abc")"}) EXPECT_EQ(verdict(bounded, text), "whole") << text;
  for (const char* text : {R"("a")", R"("abcd")"}) EXPECT_EQ(verdict(bounded, text), "refused") << text;
  const std::pair<const char*, std::vector<const char*>> formats[] = {
      {"date-time", {R"("2024-05-06T07:08:09Z")", R"("1999-12-28T23:59:59.123456Z")"}},
      {"date", {R"("2024-02-28")"}},
      {"time", {R"("07:08:09")"}},
      {"duration", {R"("P3D")", R"("PT4H30M")"}},
      {"email", {R"("ann.lee@example.com")"}},
      {"uuid", {R"("123e4567-e89b-42d3-a456-426614174000")"}},
      {"ipv4", {R"("192.168.0.255")"}},
      {"ipv6", {R"("2001:db8:0:0:0:0:2:1")"}},
      {"uri", {R"("https://example.com/a/b")"}},
      {"hostname", {R"("api.example.com")"}},
  };
  for (const auto& [format, texts] : formats) {
    const Grammar grammar =
        json_schema_grammar(ojson({{"type", "string"}, {"format", format}, {"pattern", "(?=unused)"}}));
    for (const char* text : texts) EXPECT_EQ(verdict(grammar, text), "whole") << format << " " << text;
    EXPECT_EQ(verdict(grammar, R"("not it")"), "refused") << format;
  }
  const Grammar offset = json_schema_grammar(ojson::parse(R"({"type": "string", "format": "date-time"})"));
  EXPECT_EQ(verdict(offset, R"("2024-05-06T07:08:09+01:00")"), "refused");  // UTC only, as zod's default
  EXPECT_EQ(verdict(json_schema_grammar(ojson::parse(R"({"type": "string", "format": "color"})")), R"("red")"),
            "whole");
}

TEST(JsonGrammar, AllOfPrefixItemsAndPropertyCounts) {
  const Grammar merged = json_schema_grammar(ojson::parse(R"({"$defs": {"base": {"type": "object",
      "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
      "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"name": {"type": "string"}}, "required": ["name"]}]})"));
  EXPECT_EQ(verdict(merged, R"({"id": 1, "name": "x"})"), "whole");
  EXPECT_EQ(verdict(merged, R"({"name": "x"})"), "refused");
  const Grammar tuple = json_schema_grammar(ojson::parse(R"({"type": "array", "prefixItems": [{"type": "integer"},
      {"type": "string"}], "minItems": 2, "maxItems": 2})"));
  EXPECT_EQ(verdict(tuple, R"([1, "a"])"), "whole");
  for (const char* text : {R"([1])", R"(["a", 1])", R"([1, "a", 2])"})
    EXPECT_EQ(verdict(tuple, text), "refused") << text;
  const Grammar open = json_schema_grammar(ojson::parse(R"({"type": "array", "prefixItems": [{"type": "integer"}],
      "items": {"type": "boolean"}, "maxItems": 3})"));
  EXPECT_EQ(verdict(open, R"([1, true, false])"), "whole");
  EXPECT_EQ(verdict(open, R"([1, true, false, true])"), "refused");
  const Grammar counted =
      json_schema_grammar(ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}, "c": {"type": "integer"}}, "minProperties": 1, "maxProperties": 2})"));
  for (const char* text : {R"({"a": 1})", R"({"a": 1, "b": 2})"}) EXPECT_EQ(verdict(counted, text), "whole") << text;
  for (const char* text : {R"({})", R"({"a": 1, "b": 2, "c": 3})"})
    EXPECT_EQ(verdict(counted, text), "refused") << text;
  const Grammar anything =
      json_schema_grammar(ojson::parse(R"({"enum": [{"a": [1, null]}, "x", 2.5], "title": "t", "$schema": "s"})"));
  EXPECT_EQ(verdict(anything, R"({"a":[1,null]})"), "whole");
  EXPECT_EQ(verdict(anything, "2.5"), "whole");
}

// A thinking model's reasoning first, free but for the closing tag, then the document.
TEST(JsonGrammar, ThinkingFirst) {
  const ojson schema =
      ojson::parse(R"({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]})");
  const Grammar optional = json_schema_grammar(schema, ThinkingFirst{false});
  for (const char* text : {R"({"ok": true})", "<think>Hm, </thin k> <think> {x}</think>\n\n{\"ok\": false}",
                           "<think></think>{\"ok\": true}"})
    EXPECT_EQ(verdict(optional, text), "whole") << text;
  for (const char* text :
       {"Hm</think>{\"ok\": true}", "<think>a</think>b</think>{\"ok\": true}", "<think>a</think>     {\"ok\": true}"})
    EXPECT_EQ(verdict(optional, text), "refused") << text;
  const Grammar opened = json_schema_grammar(schema, ThinkingFirst{true});
  EXPECT_EQ(verdict(opened, "Let me see.</think>\n{\"ok\": true}"), "whole");
  EXPECT_EQ(verdict(opened, R"({"ok": true})"), "prefix");  // still reasoning: its text may hold anything
  EXPECT_EQ(verdict(json_object_grammar(ThinkingFirst{true}), "x</think>{}"), "whole");
  EXPECT_EQ(verdict(Grammar(choice_grammar({"yes", "no"}, ThinkingFirst{false})), "<think>?</think>no"), "whole");
}

// Each character of JSON's alphabet (as a byte-level BPE vocabulary has every byte), then tokens
// of a few of them, and some beyond.
std::vector<std::string> random_tokens(std::mt19937& rng, int count) {
  const std::string alphabet = "{}[]\":, \n0123456789.-eEtrufalsn\\abcxyz";
  std::vector<std::string> tokens = {"{\"",
                                     "\":",
                                     "\": ",
                                     "\",",
                                     "\"}",
                                     "}}",
                                     "]}",
                                     "true",
                                     "false",
                                     "null",
                                     ", \"",
                                     "é",
                                     "\xe2\x82",
                                     "\xac",
                                     "d\": \"",
                                     "long words ",
                                     "letters and spaces",
                                     "\\u00e9",
                                     "\\n"};
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

// Walks random allowed tokens to the end, checking at every step that the mask (positions'
// parts and uncertain tokens) is exactly the tokens a fresh matcher accepts after the text so far;
// the text must parse. Two grammars share each vocabulary, so the second reuses the first's
// position masks where their rules are the same (strings, integers).
TEST(JsonGrammar, TokenMasksEqualTryingEveryToken) {
  const std::vector<std::shared_ptr<const Grammar>> grammars = {
      std::make_shared<const Grammar>(json_schema_grammar(ojson::parse(R"({"type": "object",
      "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 3},
      "c": {"enum": [true, null]}, "d": {"type": "string", "maxLength": 40}}, "required": ["a", "c"]})"))),
      std::make_shared<const Grammar>(json_schema_grammar(ojson::parse(R"({"$defs": {"node": {"type": "object",
      "properties": {"a": {"type": "integer"}, "c": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/node"}]}},
      "required": ["a", "c"]}}, "$ref": "#/$defs/node"})")))};
  int finished = 0;
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> tokens = random_tokens(rng, 400);
    const int32_t eos = int32_t(tokens.size()) - 1;
    const auto vocabulary = std::make_shared<const Vocabulary>(tokens, std::vector<int32_t>{eos});
    for (const auto& grammar : grammars) {
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
  }
  EXPECT_GE(finished, 8);  // most walks reach the end of sequence within 200 tokens
}

}  // namespace
}  // namespace mlaserve::grammar
