#include "grammar/json_schema.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "base/error.h"
#include "grammar/number_ranges.h"
#include "grammar/pattern.h"

namespace mlaserve::grammar {
namespace {

using ojson = nlohmann::ordered_json;
using B = GrammarBuilder;
constexpr int kMaxBound = 4096;  // minLength, maxLength, minItems, maxItems

const std::set<std::string> kAnnotations = {
    "title",      "description", "default",   "examples",         "$schema",         "$id",   "$comment",    "format",
    "deprecated", "readOnly",    "writeOnly", "contentMediaType", "contentEncoding", "$defs", "definitions", "strict"};
const std::set<std::string> kHandled = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "items",
                                        "prefixItems",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "enum",
                                        "const",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "nullable",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "minProperties",
                                        "maxProperties",
                                        "propertyNames",
                                        "additionalItems"};

Item set_of(std::string_view bytes) {
  Item item;
  for (char c : bytes) item.bytes.set(uint8_t(c));
  return item;
}

}  // namespace

JsonRules::JsonRules(GrammarBuilder& builder, const ojson& root) : root_(root), builder_(builder) { add_primitives(); }

int32_t JsonRules::alternatives(const std::string& name, const std::vector<int32_t>& rules) {
  std::vector<Sequence> options;
  for (int32_t rule : rules) options.push_back({B::ref(rule)});
  return builder_.rule(name, std::move(options));
}

// The JSON grammar (RFC 8259) with bounded whitespace and digits; strings hold valid UTF-8.
void JsonRules::add_primitives() {
  const int32_t indent = builder_.repeat("indent", {set_of(" \t")}, 0, 20);
  ws_ = builder_.rule("ws", {{}, B::literal(" "), {B::byte('\n'), B::ref(indent)}});
  const Item hex = set_of("0123456789abcdefABCDEF");
  ByteSet plain = B::range(0x20, 0x7f).bytes;
  plain.reset('"');
  plain.reset('\\');
  std::vector<Sequence> characters_or_escapes = B::utf8_character(plain);
  characters_or_escapes.push_back({B::byte('\\'), set_of("\"\\/bfnrt")});
  characters_or_escapes.push_back({B::byte('\\'), B::byte('u'), hex, hex, hex, hex});
  character_ = builder_.rule("char", std::move(characters_or_escapes));
  const int32_t characters = builder_.repeat("chars", {B::ref(character_)}, 0, -1);
  string_ = builder_.rule("string", {{B::byte('"'), B::ref(characters), B::byte('"')}});
  const int32_t digits = builder_.repeat("digits15", {B::range('0', '9')}, 0, 15);
  const int32_t natural = builder_.rule("natural", {B::literal("0"), {B::range('1', '9'), B::ref(digits)}});
  integer_ = builder_.rule("integer", {{B::ref(natural)}, {B::byte('-'), B::ref(natural)}});
  const int32_t fraction =
      builder_.optional("fraction", {B::byte('.'), B::ref(builder_.repeat("digits16", {B::range('0', '9')}, 1, 16))});
  const int32_t exponent =
      builder_.optional("exponent", {set_of("eE"), B::ref(builder_.optional("sign", {set_of("+-")})),
                                     B::ref(builder_.repeat("digits3", {B::range('0', '9')}, 1, 3))});
  number_ = builder_.rule("number", {{B::ref(integer_), B::ref(fraction), B::ref(exponent)}});
  value_ = builder_.declare("value");
  object_ = map_of("object", value_);
  array_ = list_of("array", value_, 0, -1);
  builder_.define(value_, {{B::ref(object_)},
                           {B::ref(array_)},
                           {B::ref(string_)},
                           {B::ref(number_)},
                           B::literal("true"),
                           B::literal("false"),
                           B::literal("null")});
}

const ojson* JsonRules::resolved(const std::string& ref, const std::string& where) const {
  const ojson* target = nullptr;
  if (ref == "#") target = &root_;
  for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
    const std::string section = std::string(prefix).substr(2, std::string(prefix).size() - 3);
    if (ref.starts_with(prefix) && root_.contains(section) &&
        root_[section].contains(ref.substr(std::string(prefix).size())))
      target = &root_[section][ref.substr(std::string(prefix).size())];
  }
  MLA_CHECK(target, "JSON schema at {}: $ref '{}' does not resolve (#, #/$defs/NAME or #/definitions/NAME)", where,
            ref);
  return target;
}

int32_t JsonRules::reference(const std::string& ref, const std::string& where) {
  auto found = references_.find(ref);
  if (found != references_.end()) return found->second;
  const ojson* target = resolved(ref, where);
  const int32_t rule = builder_.declare("ref " + ref);
  references_[ref] = rule;  // before the definition: a schema may refer to itself
  builder_.define(rule, {{B::ref(schema_rule(*target, ref))}});
  return rule;
}

int32_t JsonRules::schema_rule(const ojson& schema, const std::string& where) {
  if (schema.is_boolean()) {
    MLA_CHECK(schema.get<bool>(), "JSON schema at {}: false accepts nothing", where);
    return value_;
  }
  MLA_CHECK(schema.is_object(), "JSON schema at {}: a schema must be an object or a boolean", where);
  for (const auto& [key, value] : schema.items())
    MLA_CHECK(kAnnotations.contains(key) || kHandled.contains(key), "JSON schema at {}: '{}' is not supported", where,
              key);
  const std::string name = fmt::format("{} #{}", where, rules_made_++);
  if (schema.contains("nullable") && schema["nullable"] == true) {
    ojson rest = schema;
    rest.erase("nullable");
    return builder_.rule(name, {{B::ref(schema_rule(rest, where))}, B::literal("null")});
  }
  if (schema.contains("$ref")) return reference(schema["$ref"].get<std::string>(), where);
  if (schema.contains("const")) return builder_.rule(name, {B::literal(schema["const"].dump())});
  if (schema.contains("enum")) {
    MLA_CHECK(schema["enum"].is_array() && !schema["enum"].empty(),
              "JSON schema at {}: 'enum' must be a non-empty list", where);
    std::vector<Sequence> options;
    for (const auto& value : schema["enum"]) options.push_back(B::literal(value.dump()));
    return builder_.rule(name, std::move(options));
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (!schema.contains(key)) continue;
    std::vector<int32_t> options;
    for (size_t i = 0; i < schema[key].size(); ++i)
      options.push_back(schema_rule(schema[key][i], fmt::format("{}/{}/{}", where, key, i)));
    return alternatives(name, options);
  }
  if (schema.contains("allOf")) return schema_rule(merged_all_of(schema, where), where + "/allOf");
  if (!schema.contains("type")) {
    if (schema.contains("properties") || schema.contains("additionalProperties")) return object_rule(schema, where);
    if (schema.contains("items")) return array_rule(schema, where);
    return value_;
  }
  if (schema["type"].is_array()) {
    std::vector<int32_t> options;
    for (const auto& type : schema["type"]) options.push_back(typed(schema, type.get<std::string>(), where));
    return alternatives(name, options);
  }
  return typed(schema, schema["type"].get<std::string>(), where);
}

int32_t JsonRules::typed(const ojson& schema, const std::string& type, const std::string& where) {
  if (type == "object") return object_rule(schema, where);
  if (type == "array") return array_rule(schema, where);
  if (type == "string") return string_rule(schema, where);
  if (type == "integer" || type == "number") return number_rule(schema, type == "integer", where);
  if (type == "boolean") return builder_.rule(where + " boolean", {B::literal("true"), B::literal("false")});
  if (type == "null") return builder_.rule(where + " null", {B::literal("null")});
  fail("JSON schema at {}: unknown type '{}'", where, type);
}

// The properties in the schema's order, each required one present, commas between: rule
// (i, comma) matches properties i.. when `comma` says one was already written.
int32_t JsonRules::object_rule(const ojson& schema, const std::string& where) {
  const ojson properties = schema.value("properties", ojson::object());
  if (properties.empty()) {
    const ojson extra = schema.value("additionalProperties", ojson(true));
    if (extra == false) return builder_.rule(where + " empty object", {{B::byte('{'), B::ref(ws_), B::byte('}')}});
    if (extra == true && !schema.contains("propertyNames")) return object_;
    const int32_t value = extra == true ? value_ : schema_rule(extra, where + "/additionalProperties");
    const int32_t key =
        schema.contains("propertyNames") ? schema_rule(schema["propertyNames"], where + "/propertyNames") : string_;
    return map_of(where + " object", value, key);
  }
  std::set<std::string> required;
  for (const auto& name : schema.value("required", ojson::array())) required.insert(name.get<std::string>());
  for (const auto& name : required)
    MLA_CHECK(properties.contains(name), "JSON schema at {}: required property '{}' is not in properties", where, name);
  // minProperties/maxProperties: the first optional properties become required, or the last
  // ones are left out, so that every object written has an allowed count.
  const auto [min_count, max_count] = bounds(schema, where, "minProperties", "maxProperties");
  MLA_CHECK(min_count <= int(properties.size()) && (max_count < 0 || max_count >= int(required.size())),
            "JSON schema at {}: minProperties/maxProperties cannot be met by its properties", where);
  std::vector<std::pair<std::string, int32_t>> members;
  int optional_kept = 0;
  for (const auto& [key, value] : properties.items()) {
    if (!required.contains(key)) {
      if (int(required.size()) < min_count)
        required.insert(key);
      else if (max_count >= 0 && int(required.size()) + optional_kept >= max_count)
        continue;
      else
        ++optional_kept;
    }
    members.emplace_back(key, schema_rule(value, where + "/" + key));
  }
  int32_t after = builder_.rule(where + " end", {{}}), after_comma = after;  // (n, false) and (n, true)
  for (size_t i = members.size(); i-- > 0;) {
    const auto& [key, value] = members[i];
    const Sequence member = {B::ref(builder_.rule(where + " key " + key, {B::literal(ojson(key).dump())})),
                             B::byte(':'), B::ref(ws_), B::ref(value), B::ref(ws_)};
    const Sequence first = B::join({member, {B::ref(after_comma)}});
    const Sequence next = B::join({B::literal(","), {B::ref(ws_)}, member, {B::ref(after_comma)}});
    const bool must = required.contains(key);
    const int32_t without_comma = builder_.rule(
        where + " from " + key, must ? std::vector<Sequence>{first} : std::vector<Sequence>{first, {B::ref(after)}});
    const int32_t with_comma =
        builder_.rule(where + " from ," + key,
                      must ? std::vector<Sequence>{next} : std::vector<Sequence>{next, {B::ref(after_comma)}});
    after = without_comma;
    after_comma = with_comma;
  }
  return builder_.rule(where + " object", {{B::byte('{'), B::ref(ws_), B::ref(after), B::byte('}')}});
}

// items, minItems and maxItems; with prefixItems, those items in order (all of them), then up to
// maxItems of `items` (none unless maxItems says more: writing no more is always valid).
int32_t JsonRules::array_rule(const ojson& schema, const std::string& where) {
  const auto [min, max] = bounds(schema, where, "minItems", "maxItems");
  // Draft 7 writes a tuple as an items list with additionalItems for the rest.
  const bool listed = schema.contains("items") && schema["items"].is_array();
  if (!schema.contains("prefixItems") && !listed) {
    const int32_t item = schema.contains("items") ? schema_rule(schema["items"], where + "/items") : value_;
    return list_of(where + " array", item, min, max);
  }
  const ojson& prefix = listed ? schema["items"] : schema["prefixItems"];
  MLA_CHECK(prefix.is_array() && !prefix.empty(), "JSON schema at {}: prefixItems must be a non-empty list", where);
  const int count = int(prefix.size());
  MLA_CHECK(max < 0 || max >= count, "JSON schema at {}: maxItems {} is below the {} prefixItems", where, max, count);
  Sequence elements = {B::byte('['), B::ref(ws_)};
  for (int i = 0; i < count; ++i) {
    if (i > 0) elements = B::join({elements, B::literal(","), {B::ref(ws_)}});
    elements =
        B::join({elements, {B::ref(schema_rule(prefix[i], fmt::format("{}/prefixItems/{}", where, i))), B::ref(ws_)}});
  }
  const ojson rest = listed ? schema.value("additionalItems", ojson(false)) : schema.value("items", ojson(false));
  if (rest != false && max > count) {
    const int32_t item = schema_rule(rest, where + "/items");
    elements.push_back(
        B::ref(builder_.repeat(where + " more", B::join({B::literal(","), {B::ref(ws_)}, {B::ref(item), B::ref(ws_)}}),
                               std::max(min - count, 0), max - count)));
  }
  return builder_.rule(where + " tuple", {B::join({elements, {B::byte(']')}})});
}

// "{" members "}": keys `key` (any string by default), each value `value`.
int32_t JsonRules::map_of(const std::string& name, int32_t value, int32_t key) {
  const Sequence member = {B::ref(key < 0 ? string_ : key), B::byte(':'), B::ref(ws_), B::ref(value), B::ref(ws_)};
  const int32_t more = builder_.repeat(name + " more", B::join({B::literal(","), {B::ref(ws_)}, member}), 0, -1);
  const int32_t members = builder_.optional(name + " members", B::join({member, {B::ref(more)}}));
  return builder_.rule(name, {{B::byte('{'), B::ref(ws_), B::ref(members), B::byte('}')}});
}

// "[" min..max items "]" (max < 0: unbounded).
int32_t JsonRules::list_of(const std::string& name, int32_t item, int min, int max) {
  if (max == 0) return builder_.rule(name, {{B::byte('['), B::ref(ws_), B::byte(']')}});
  const Sequence element = {B::ref(item), B::ref(ws_)};
  const int32_t more = builder_.repeat(name + " more", B::join({B::literal(","), {B::ref(ws_)}, element}),
                                       std::max(min - 1, 0), max < 0 ? -1 : max - 1);
  const Sequence elements = B::join({element, {B::ref(more)}});
  const int32_t body =
      min > 0 ? builder_.rule(name + " elements", {elements}) : builder_.optional(name + " elements", elements);
  return builder_.rule(name, {{B::byte('['), B::ref(ws_), B::ref(body), B::byte(']')}});
}

// A bounded repetition is unrolled into one rule per count, so its bounds are capped.
// minItems/maxItems or minLength/maxLength: integers in [0, kMaxBound], min <= max (max -1: none).
std::pair<int, int> JsonRules::bounds(const ojson& schema, const std::string& where, const char* min_key,
                                      const char* max_key) {
  const auto read = [&](const char* key, int absent) {
    if (!schema.contains(key)) return absent;
    const ojson& value = schema[key];
    MLA_CHECK(value.is_number_integer() && value.get<int64_t>() >= 0 && value.get<int64_t>() <= kMaxBound,
              "JSON schema at {}: {} {} is not an integer in [0, {}]", where, key, value.dump(), kMaxBound);
    return int(value.get<int64_t>());
  };
  const int min = read(min_key, 0), max = read(max_key, -1);
  MLA_CHECK(max < 0 || max >= min, "JSON schema at {}: {}/{} {}..{} is empty", where, min_key, max_key, min, max);
  return {min, max};
}

// A string of a known format (its pattern: a format's strings satisfy the patterns clients
// publish beside it), or matching `pattern`, or any, within minLength..maxLength.
int32_t JsonRules::string_rule(const ojson& schema, const std::string& where) {
  const auto [min, max] = bounds(schema, where, "minLength", "maxLength");
  std::optional<std::string> pattern = schema.contains("format") && schema["format"].is_string()
                                           ? format_pattern(schema["format"].get<std::string>())
                                           : std::nullopt;
  if (!pattern && schema.contains("pattern")) {
    MLA_CHECK(schema["pattern"].is_string(), "JSON schema at {}: pattern must be a string", where);
    pattern = schema["pattern"].get<std::string>();
  }
  if (!pattern && !schema.contains("minLength") && !schema.contains("maxLength")) return string_;
  const int32_t characters = pattern ? pattern_rule(builder_, where, *pattern, {min, max})
                                     : builder_.repeat(where + " chars", {B::ref(character_)}, min, max);
  return builder_.rule(where + " string", {{B::byte('"'), B::ref(characters), B::byte('"')}});
}

// minimum/maximum and their exclusive forms (numbers, or draft 4's booleans beside minimum and
// maximum) as number_ranges.h writes them.
int32_t JsonRules::number_rule(const ojson& schema, bool integer, const std::string& where) {
  NumberBounds bounds;
  auto bound = [&](const char* key, const char* exclusive_key, std::optional<double>& value, bool& exclusive) {
    if (schema.contains(key)) {
      MLA_CHECK(schema[key].is_number(), "JSON schema at {}: {} must be a number", where, key);
      value = schema[key].get<double>();
    }
    if (!schema.contains(exclusive_key)) return;
    const ojson& given = schema[exclusive_key];
    MLA_CHECK(given.is_number() || given.is_boolean(), "JSON schema at {}: {} must be a number", where, exclusive_key);
    if (given.is_boolean()) {
      exclusive = given.get<bool>() && value.has_value();
    } else if (!value ||
               (std::string(key) == "minimum" ? given.get<double>() >= *value : given.get<double>() <= *value)) {
      value = given.get<double>();
      exclusive = true;
    }
  };
  bound("minimum", "exclusiveMinimum", bounds.low, bounds.low_exclusive);
  bound("maximum", "exclusiveMaximum", bounds.high, bounds.high_exclusive);
  if (!bounds.low && !bounds.high) return integer ? integer_ : number_;
  return integer ? integer_in_range(builder_, where, bounds) : number_in_range(builder_, where, bounds);
}

// allOf of object schemas (or $refs to them) as one object: every branch's properties (a later
// branch's schema for a name given twice) and required names.
ojson JsonRules::merged_all_of(const ojson& schema, const std::string& where) {
  MLA_CHECK(schema["allOf"].is_array() && !schema["allOf"].empty(),
            "JSON schema at {}: 'allOf' must be a non-empty list", where);
  if (schema["allOf"].size() == 1 && schema.size() == 1) return schema["allOf"][0];
  ojson merged = schema;
  merged.erase("allOf");
  ojson properties = merged.value("properties", ojson::object()), required = merged.value("required", ojson::array());
  for (size_t i = 0; i < schema["allOf"].size(); ++i) {
    ojson branch = schema["allOf"][i];
    for (int hops = 0; branch.is_object() && branch.contains("$ref") && hops < 16; ++hops)
      branch = *resolved(branch["$ref"].get<std::string>(), where);
    const bool object =
        branch.is_object() && (branch.value("type", "object") == "object" || branch.contains("properties"));
    MLA_CHECK(object, "JSON schema at {}/allOf/{}: only an allOf of object schemas is supported", where, i);
    const ojson branch_properties = branch.value("properties", ojson::object());
    const ojson branch_required = branch.value("required", ojson::array());
    for (const auto& [key, value] : branch_properties.items()) properties[key] = value;
    for (const auto& name : branch_required)
      if (std::find(required.begin(), required.end(), name) == required.end()) required.push_back(name);
    if (branch.contains("additionalProperties")) merged["additionalProperties"] = branch["additionalProperties"];
  }
  merged["type"] = "object";
  merged["properties"] = properties;
  merged["required"] = required;
  return merged;
}

Grammar json_object_grammar(const std::optional<ThinkingFirst>& thinking) {
  const ojson empty = ojson::object();
  GrammarBuilder builder;
  JsonRules json(builder, empty);
  return std::move(builder).build(thinking ? thinking_then(builder, json.any_object(), *thinking) : json.any_object());
}

Grammar json_schema_grammar(const ojson& schema, const std::optional<ThinkingFirst>& thinking) {
  try {
    GrammarBuilder builder;
    JsonRules json(builder, schema);
    const int32_t root = json.schema_rule(schema, "#");
    return std::move(builder).build(thinking ? thinking_then(builder, root, *thinking) : root);
  } catch (const nlohmann::json::exception& e) {  // a keyword's value of the wrong type
    fail("JSON schema: {}", e.what());
  }
}

}  // namespace mlaserve::grammar
