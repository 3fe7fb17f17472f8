// Grammars for JSON text: any JSON object (response_format json_object), or text that validates
// against a JSON Schema (response_format json_schema, tool arguments). Supported: type (or a
// list of types), properties (in the schema's order; the required ones always, the others
// optionally; no properties beyond them), additionalProperties as the value schema of an object
// without properties, items with minItems/maxItems, minLength/maxLength (up to 4096), enum,
// const, anyOf/oneOf (as alternatives), a one-schema allOf, $ref into $defs/definitions or to
// the root (recursion allowed), nullable, minimum 0 or 1 for numbers and integers. Annotations
// (title, description, default, examples, format, ...) are ignored; any other keyword is an
// Error naming it and where it is. Whitespace is bounded ("", " ", or a newline and up to 20
// spaces or tabs), integers to 16 digits and fractions to 16, as llama.cpp's grammars bound
// them, so that a sampler cannot wander forever.
#pragma once
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"

namespace mlaserve::grammar {

Grammar json_object_grammar();
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);

}  // namespace mlaserve::grammar
