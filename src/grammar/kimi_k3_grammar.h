// Constrained output in Kimi K3's XTML (what vLLM's K3 structural tag asks for): the channels as
// K3 writes them, every marker the special token itself (special_token_spelling), text free of
// "<|", and either a JSON response (response_format) or a tools block of calls whose typed
// arguments follow each tool's parameters: string values raw, every other value JSON under the
// property's schema.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>

#include "grammar/grammar.h"
#include "tokenizer/kimi_k3_chat.h"

namespace mlaserve::grammar {

struct KimiK3Constraint {
  KimiK3Opened opened = KimiK3Opened::Think;  // where the prompt left the output
  // The response channel holds JSON: any object (null) or a value valid under the schema.
  std::optional<nlohmann::ordered_json> response_schema;
  // Non-empty: a tools block must follow, of calls to these OpenAI tools ({"type": "function",
  // "function": {"name", "parameters"}}); one_call: exactly one. Without response_schema the
  // response before it is at most 256 characters, or empty with one tool named (the call is
  // made at once).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  bool one_call = false;
  bool named = false;
};

// Throws Error naming what a tool's parameters or the schema ask that cannot be written.
Grammar kimi_k3_grammar(const KimiK3Constraint& constraint);

}  // namespace mlaserve::grammar
