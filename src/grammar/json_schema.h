// Grammars for JSON text: any JSON object (response_format json_object), or text that validates
// against a JSON Schema (response_format json_schema, tool arguments), as clients write schemas
// (zod, Pydantic, OpenAI strict mode). Supported: type (or a list of types, "null" among them),
// properties (in the schema's order; the required ones always, the others optionally; no
// properties beyond them; minProperties/maxProperties met by requiring or leaving out optional
// ones), additionalProperties as the value schema of an object without properties (its keys
// under propertyNames), items, prefixItems (or draft 7's items list and additionalItems),
// minItems/maxItems, minLength/maxLength (up to 4096), pattern and the formats of
// pattern.h, minimum/maximum/exclusiveMinimum/exclusiveMaximum (number_ranges.h), enum and const
// of any values, anyOf/oneOf (as alternatives), allOf of object schemas (merged), $ref into
// $defs/definitions or to the root (recursion allowed), nullable. Annotations (title,
// description, default, examples, format, ...) are ignored; any other keyword is an Error naming
// it and where it is. Whitespace is bounded ("", " ", or a newline and up to 20 spaces or tabs),
// integers to 16 digits and fractions to 16, as llama.cpp's grammars bound them, so that a
// sampler cannot wander forever.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"

namespace mlaserve::grammar {

// With `thinking`, a thinking model's reasoning may come first (grammar.h).
Grammar json_object_grammar(const std::optional<ThinkingFirst>& thinking = std::nullopt);
Grammar json_schema_grammar(const nlohmann::ordered_json& schema,
                            const std::optional<ThinkingFirst>& thinking = std::nullopt);

// JSON's rules added to a grammar being built, for grammars that hold JSON values among other
// text (Kimi K3's tool arguments). `root` is what $ref resolves against; it must outlive this.
class JsonRules {
 public:
  JsonRules(GrammarBuilder& builder, const nlohmann::ordered_json& root);
  int32_t any_object() const { return object_; }
  int32_t any_value() const { return value_; }
  // A value valid under `schema` (`where`: its path, for errors). Throws Error as above.
  int32_t schema_rule(const nlohmann::ordered_json& schema, const std::string& where);

 private:
  using ojson = nlohmann::ordered_json;
  void add_primitives();
  int32_t typed(const ojson& schema, const std::string& type, const std::string& where);
  int32_t object_rule(const ojson& schema, const std::string& where);
  int32_t array_rule(const ojson& schema, const std::string& where);
  int32_t string_rule(const ojson& schema, const std::string& where);
  int32_t number_rule(const ojson& schema, bool integer, const std::string& where);
  int32_t reference(const std::string& ref, const std::string& where);
  const ojson* resolved(const std::string& ref, const std::string& where) const;
  ojson merged_all_of(const ojson& schema, const std::string& where);
  int32_t alternatives(const std::string& name, const std::vector<int32_t>& rules);
  int32_t map_of(const std::string& name, int32_t value, int32_t key = -1);
  int32_t list_of(const std::string& name, int32_t item, int min, int max);
  static std::pair<int, int> bounds(const ojson& schema, const std::string& where, const char* min_key,
                                    const char* max_key);

  const ojson& root_;
  GrammarBuilder& builder_;
  int32_t ws_ = -1, character_ = -1, string_ = -1, integer_ = -1, number_ = -1, value_ = -1, object_ = -1, array_ = -1;
  std::map<std::string, int32_t> references_;
  int rules_made_ = 0;
};

}  // namespace mlaserve::grammar
