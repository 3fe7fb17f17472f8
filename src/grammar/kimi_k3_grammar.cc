#include "grammar/kimi_k3_grammar.h"

#include <set>

#include "base/error.h"
#include "grammar/json_schema.h"

namespace mlaserve::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using B = GrammarBuilder;
using namespace kimi_k3;
constexpr int kMaxLength = 4096;              // minLength/maxLength of a raw string value
constexpr int kMaxResponseBeforeCalls = 256;  // what a required call may say first (as vLLM)

ByteSet ascii_except(std::string_view excluded) {
  ByteSet bytes;
  for (int value = 0; value < 0x80; ++value) bytes.set(size_t(value));
  for (char c : excluded) bytes.reset(uint8_t(c));
  return bytes;
}

// Attribute values escape & then ", as the encoder writes them.
std::string escaped(std::string_view value) {
  std::string out;
  for (char c : value) out += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

class KimiK3Grammar {
 public:
  int32_t root(const KimiK3Constraint& constraint);
  Grammar build(int32_t root) && { return std::move(builder_).build(root); }

 private:
  Sequence marker(std::string_view text) const { return B::literal(special_token_spelling(text)); }
  Sequence open_tag(std::string_view header) const {
    return B::join({marker(kOpen), B::literal(header), marker(kSep)});
  }
  Sequence close_tag(std::string_view name) const { return B::join({marker(kClose), B::literal(name), marker(kSep)}); }
  int32_t text(const std::string& name, int max_units);
  int32_t raw_string(const ojson& property, const std::string& where);
  int32_t argument(const std::string& key, const ojson& property, JsonRules& json, const std::string& where);
  int32_t any_argument(JsonRules& json);
  int32_t call(const ojson& tool);

  GrammarBuilder builder_;
};

// Text free of "<|" (max_units < 0: any length): units of a character other than '<', or of
// '<'s and a character other than '<' and '|'; then any '<'s.
int32_t KimiK3Grammar::text(const std::string& name, int max_units) {
  const int32_t plain = builder_.rule(name + " char", B::utf8_character(ascii_except("<")));
  const int32_t after_lt = builder_.rule(name + " after <", B::utf8_character(ascii_except("<|")));
  const int32_t lts = builder_.repeat(name + " <s", {B::byte('<')}, 1, -1);
  const int32_t unit = builder_.rule(name + " unit", {{B::ref(plain)}, {B::ref(lts), B::ref(after_lt)}});
  const int32_t units = builder_.repeat(name + " units", {B::ref(unit)}, 0, max_units);
  return builder_.rule(name, {{B::ref(units), B::ref(builder_.repeat(name + " trailing <s", {B::byte('<')}, 0, -1))}});
}

// A string value, written raw: one of its enum/const strings, or minLength..maxLength characters
// (no '<', so that the count is exact), or any text free of "<|".
int32_t KimiK3Grammar::raw_string(const ojson& property, const std::string& where) {
  ojson values = property.contains("const") ? ojson::array({property["const"]}) : property.value("enum", ojson());
  if (values.is_array()) {
    std::vector<Sequence> options;
    for (const auto& value : values)
      if (value.is_string() && value.get<std::string>().find("<|") == std::string::npos)
        options.push_back(B::literal(value.get<std::string>()));
    MLA_CHECK(!options.empty(), "tool parameters at {}: no enum value can be written as a raw string", where);
    return builder_.rule(where + " enum", std::move(options));
  }
  if (!property.contains("minLength") && !property.contains("maxLength")) return text(where + " text", -1);
  const auto bound = [&](const char* key, int absent) {
    const ojson value = property.value(key, ojson(absent));
    MLA_CHECK(value.is_number_integer() && value.get<int64_t>() >= -1 && value.get<int64_t>() <= kMaxLength,
              "tool parameters at {}: {} {} is not an integer in [0, {}]", where, key, value.dump(), kMaxLength);
    return int(value.get<int64_t>());
  };
  const int min = bound("minLength", 0), max = bound("maxLength", -1);
  MLA_CHECK(max < 0 || max >= min, "tool parameters at {}: minLength/maxLength {}..{} is empty", where, min, max);
  const int32_t character = builder_.rule(where + " char", B::utf8_character(ascii_except("<")));
  return builder_.repeat(where + " chars", {B::ref(character)}, min, max);
}

// The JSON types a property's values may have (XTML's types: integer is number); empty when the
// schema does not say ($ref, allOf, or no type at all).
std::set<std::string> xtml_types(const ojson& property) {
  std::set<std::string> types;
  auto add = [&](const ojson& type) {
    if (type.is_string()) types.insert(type == "integer" ? "number" : type.get<std::string>());
  };
  if (property.contains("type")) {
    for (const auto& type : property["type"].is_array() ? property["type"] : ojson::array({property["type"]}))
      add(type);
  } else if (property.contains("enum") || property.contains("const")) {
    const ojson values = property.contains("const") ? ojson::array({property["const"]}) : property["enum"];
    for (const auto& value : values)
      add(value.is_string()    ? "string"
          : value.is_boolean() ? "boolean"
          : value.is_null()    ? "null"
          : value.is_number()  ? "number"
          : value.is_object()  ? "object"
                               : "array");
  } else {
    for (const char* key : {"anyOf", "oneOf"})
      for (const auto& branch : property.value(key, ojson::array())) {
        const std::set<std::string> more = xtml_types(branch);
        if (more.empty()) return {};
        types.insert(more.begin(), more.end());
      }
  }
  if (property.value("nullable", false) && !types.empty()) types.insert("null");
  return types;
}

// <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|>, one alternative a type.
int32_t KimiK3Grammar::argument(const std::string& key, const ojson& property, JsonRules& json,
                                const std::string& where) {
  std::set<std::string> types = xtml_types(property);
  if (types.empty()) types = {"string", "number", "boolean", "null", "object", "array"};
  std::vector<Sequence> options;
  for (const std::string& type : types) {
    const int32_t value = type == "string" ? raw_string(property, where) : json.schema_rule(property, where);
    options.push_back(B::join({open_tag("argument key=\"" + escaped(key) + "\" type=\"" + type + "\""),
                               {B::ref(value)},
                               close_tag("argument")}));
  }
  return builder_.rule(where + " argument", std::move(options));
}

// An argument of any key and type, for a tool whose parameters name no properties.
int32_t KimiK3Grammar::any_argument(JsonRules& json) {
  const int32_t key_char = builder_.rule("key char", B::utf8_character(ascii_except("\"<")));
  const int32_t key = builder_.repeat("key", {B::ref(key_char)}, 0, -1);
  const Sequence head =
      B::join({marker(kOpen), B::literal("argument key=\""), {B::ref(key)}, B::literal("\" type=\"")});
  std::vector<Sequence> options = {
      B::join({head, B::literal("string\""), marker(kSep), {B::ref(text("any string", -1))}, close_tag("argument")})};
  for (const char* type : {"number", "boolean", "null", "object", "array"})
    options.push_back(B::join(
        {head, B::literal(std::string(type) + "\""), marker(kSep), {B::ref(json.any_value())}, close_tag("argument")}));
  return builder_.rule("any argument", std::move(options));
}

// <|open|>call tool="NAME" index="N"<|sep|> the properties in their schema's order, the required
// ones always <|close|>call<|sep|>.
int32_t KimiK3Grammar::call(const ojson& tool) {
  const std::string name = tool.at("function").at("name").get<std::string>();
  const ojson parameters = tool["function"].value("parameters", ojson::object());
  JsonRules json(builder_, parameters);
  Sequence body;
  const ojson properties = parameters.is_object() ? parameters.value("properties", ojson::object()) : ojson::object();
  if (properties.empty())
    body.push_back(B::ref(builder_.repeat(name + " arguments", {B::ref(any_argument(json))}, 0, -1)));
  std::set<std::string> required;
  for (const auto& key : parameters.is_object() ? parameters.value("required", ojson::array()) : ojson::array())
    if (key.is_string()) required.insert(key.get<std::string>());
  for (const auto& [key, property] : properties.items()) {
    const int32_t one = argument(key, property, json, name + "/" + key);
    body.push_back(required.contains(key) ? B::ref(one)
                                          : B::ref(builder_.optional(name + "/" + key + "?", {B::ref(one)})));
  }
  const int32_t digits = builder_.repeat("index digits", {B::range('0', '9')}, 0, 2);
  return builder_.rule("call " + name, {B::join({marker(kOpen),
                                                 B::literal("call tool=\"" + escaped(name) + "\" index=\""),
                                                 {B::range('1', '9'), B::ref(digits)},
                                                 B::literal("\""),
                                                 marker(kSep),
                                                 body,
                                                 close_tag("call")})});
}

int32_t KimiK3Grammar::root(const KimiK3Constraint& constraint) {
  Sequence out;
  const int32_t think = text("think", -1);
  if (constraint.opened == KimiK3Opened::Think)
    out = B::join({{B::ref(think)}, close_tag("think"), open_tag("response")});
  if (constraint.opened == KimiK3Opened::Message) {
    const Sequence channel = B::join({open_tag("think"), {B::ref(think)}, close_tag("think")});
    out = B::join({{B::ref(builder_.optional("think channel", channel))}, open_tag("response")});
  }
  const ojson& tools = constraint.tools;
  if (constraint.response_schema) {
    const ojson& schema = *constraint.response_schema;
    JsonRules json(builder_, schema);
    out.push_back(B::ref(schema.is_null() ? json.any_object() : json.schema_rule(schema, "#")));
  } else if (!constraint.named) {
    out.push_back(B::ref(text("response", kMaxResponseBeforeCalls)));
  }
  out = B::join({out, close_tag("response")});
  if (!tools.empty()) {
    std::vector<Sequence> calls;
    for (const auto& tool : tools) calls.push_back({B::ref(call(tool))});
    const int32_t any_call = builder_.rule("any call", std::move(calls));
    const int32_t more = builder_.repeat("more calls", {B::ref(any_call)}, 0, constraint.one_call ? 0 : -1);
    out = B::join({out, open_tag("tools"), {B::ref(any_call), B::ref(more)}, close_tag("tools")});
  }
  return builder_.rule("root", {B::join({out, close_tag("message")})});
}

}  // namespace

Grammar kimi_k3_grammar(const KimiK3Constraint& constraint) {
  try {
    KimiK3Grammar grammar;
    const int32_t root = grammar.root(constraint);
    return std::move(grammar).build(root);
  } catch (const nlohmann::json::exception& e) {  // a keyword's value of the wrong type
    fail("JSON schema: {}", e.what());
  }
}

}  // namespace mlaserve::grammar
