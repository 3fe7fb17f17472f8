// A Jinja chat template (what --chat-template or a checkpoint supplies) rendering a conversation
// with a system prompt, tools, a tool call and its result: an Error naming the problem, or text.
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "fuzz_input.h"
#include "tokenizer/chat_template.h"

namespace {

mlaserve::ChatInput conversation() {
  mlaserve::ChatInput input;
  input.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {"role": "assistant", "content": null, "reasoning_content": "Use the tool.",
     "tool_calls": [{"id": "call_0", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": "18 C"},
    {"role": "user", "content": "Thanks"}])");
  input.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "weather",
    "description": "Current weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  input.kwargs = nlohmann::ordered_json{{"thinking", true}};
  return input;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mlaserve::ChatInput input = conversation();
  static const nlohmann::json special_tokens = {{"bos_token", "<s>"}, {"eos_token", {{"content", "</s>"}}}};
  try {
    const auto chat = mlaserve::ChatTemplate::from_source(std::string(reinterpret_cast<const char*>(data), size),
                                                          special_tokens, "fuzz");
    chat.render(input);
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
