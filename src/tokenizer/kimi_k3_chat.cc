#include "tokenizer/kimi_k3_chat.h"

#include <algorithm>
#include <map>
#include <optional>

#include "base/error.h"

namespace mlaserve {
namespace {

using ojson = nlohmann::ordered_json;
using Segments = std::vector<PromptSegment>;
using namespace kimi_k3;

void text(Segments& out, std::string value) {
  if (!value.empty()) out.push_back({std::move(value), false});
}

void marker(Segments& out, std::string_view value) { out.push_back({std::string(value), true}); }

// Attribute values escape & then " (so &quot; is not escaped again); < and > stay literal, the
// markup's brackets being tokens.
std::string escaped(std::string_view value) {
  std::string out;
  for (char c : value) out += c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return out;
}

using Attributes = std::vector<std::pair<std::string, std::string>>;

// <|open|>TAG key="value"...<|sep|>: each attribute one text segment, as the encoder writes it.
void open_tag(Segments& out, std::string_view tag, const Attributes& attributes = {}) {
  marker(out, kOpen);
  text(out, std::string(tag));
  for (const auto& [key, value] : attributes) text(out, " " + key + "=\"" + escaped(value) + "\"");
  marker(out, kSep);
}

void close_tag(Segments& out, std::string_view tag) {
  marker(out, kClose);
  text(out, std::string(tag));
  marker(out, kSep);
}

void close_message(Segments& out) {
  close_tag(out, "message");
  marker(out, kEndOfMessage);
}

// Python's json.dumps(value, ensure_ascii=False): ", " and ": " between items, keys in order.
std::string python_json(const ojson& value) {
  if (value.is_object()) {
    std::string out = "{";
    for (auto it = value.begin(); it != value.end(); ++it)
      out += (it == value.begin() ? "" : ", ") + ojson(it.key()).dump() + ": " + python_json(it.value());
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + python_json(value[i]);
    return out + "]";
  }
  return value.dump();
}

// Python's json.dumps(value, ensure_ascii=False, separators=(",", ":")) of the value with every
// object's keys sorted, as the encoder writes tool declarations and response schemas.
std::string sorted_compact_json(const ojson& value) { return nlohmann::json::parse(value.dump()).dump(); }

const char* xtml_type(const ojson& value) {
  if (value.is_boolean()) return "boolean";
  if (value.is_null()) return "null";
  if (value.is_number()) return "number";
  if (value.is_string()) return "string";
  return value.is_object() ? "object" : "array";
}

// A message's content: a string, or text parts each appended as it is (no separator).
void content(Segments& out, const ojson& message, size_t index) {
  const ojson value = message.value("content", ojson());
  if (value.is_null()) return;
  if (value.is_string()) return text(out, value.get<std::string>());
  MLA_CHECK(value.is_array(), "messages[{}].content must be a string, null or a list of parts", index);
  for (size_t i = 0; i < value.size(); ++i) {
    const ojson& part = value[i];
    MLA_CHECK(part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string(),
              "messages[{}].content[{}] is not a text part", index, i);
    text(out, part["text"].get<std::string>());
  }
}

void internal_system_message(Segments& out, std::string_view type, std::string body) {
  open_tag(out, "message", {{"role", "system"}, {"type", std::string(type)}});
  text(out, std::move(body));
  close_message(out);
}

void tool_declaration(Segments& out, const ojson& tools, bool dynamic) {
  const std::string heading = dynamic ? "## New Tools Available\n"
                                        "The system dynamically extends the toolset via lazy-loading.\n"
                                        "You have access to all existing and extended tools.\n"
                                        "Here are the specs for the extended tools.\n\n"
                                      : "# Tools\nHere are the available tools, described in JSONSchema.\n\n";
  internal_system_message(out, "tool-declare", heading + "```json\n" + sorted_compact_json(tools) + "\n```");
}

// OpenAI sends a call's arguments as a JSON string: an object becomes typed argument elements,
// text that is not JSON a raw json block (what the model wrote, shown back unrepaired).
struct CallArguments {
  ojson object = ojson::object();
  std::optional<std::string> raw;
};

CallArguments call_arguments(const ojson& arguments, size_t index) {
  if (arguments.is_null()) return {};
  if (arguments.is_object()) return {arguments, std::nullopt};
  MLA_CHECK(arguments.is_string(), "messages[{}]: Kimi K3 tool call arguments must be an object or a JSON string",
            index);
  const std::string raw = arguments.get<std::string>();
  if (raw.find_first_not_of(" \t\r\n") == std::string::npos) return {};
  const ojson parsed = ojson::parse(raw, nullptr, false);
  if (parsed.is_discarded()) return {ojson::object(), raw};
  MLA_CHECK(parsed.is_object(), "messages[{}]: Kimi K3 tool call arguments must be a JSON object", index);
  return {parsed, std::nullopt};
}

const ojson& function_of(const ojson& call) { return call.contains("function") ? call["function"] : call; }

void tool_calls(Segments& out, const ojson& calls, size_t index) {
  open_tag(out, "tools");
  for (size_t i = 0; i < calls.size(); ++i) {
    MLA_CHECK(calls[i].is_object(), "messages[{}].tool_calls[{}] must be an object", index, i);
    const ojson& function = function_of(calls[i]);
    MLA_CHECK(function.is_object() && function.contains("name") && function["name"].is_string() &&
                  !function["name"].get<std::string>().empty(),
              "messages[{}].tool_calls[{}] needs a function name", index, i);
    open_tag(out, "call", {{"tool", function["name"].get<std::string>()}, {"index", std::to_string(i + 1)}});
    const CallArguments arguments = call_arguments(function.value("arguments", ojson()), index);
    if (arguments.raw) {
      open_tag(out, "json", {{"type", "object"}});
      text(out, *arguments.raw);
      close_tag(out, "json");
    }
    for (const auto& [key, value] : arguments.object.items()) {
      open_tag(out, "argument", {{"key", key}, {"type", xtml_type(value)}});
      text(out, value.is_string() ? value.get<std::string>() : python_json(value));
      close_tag(out, "argument");
    }
    close_tag(out, "call");
  }
  close_tag(out, "tools");
}

std::string reasoning_of(const ojson& message) {
  for (const char* key : {"reasoning_content", "reasoning"})
    if (message.contains(key) && message[key].is_string() && !message[key].get<std::string>().empty())
      return message[key].get<std::string>();
  return "";
}

// The think channel is structural in thinking mode: present, if empty, in every assistant turn;
// absent in non-thinking mode (the reasoning is dropped). `open`: the final message, rendered
// unclosed to be continued.
void assistant_turn(Segments& out, const ojson& message, size_t index, bool thinking, bool open) {
  open_tag(out, "message", {{"role", "assistant"}});
  const std::string reasoning = reasoning_of(message);
  const bool has_content = !message.value("content", ojson()).is_null() && message["content"] != "";
  if (thinking) {
    open_tag(out, "think");
    if (reasoning.find_first_not_of(" \t\r\n") != std::string::npos) text(out, reasoning);
    if (open && !has_content) return;
    close_tag(out, "think");
  }
  open_tag(out, "response");
  content(out, message, index);
  if (open) return;
  close_tag(out, "response");
  const ojson calls = message.value("tool_calls", ojson());
  if (calls.is_array() && !calls.empty()) tool_calls(out, calls, index);
  close_message(out);
}

// A tool result names its tool: `tool` or `name`, else the call at its position in the preceding
// assistant turn.
std::string tool_name(const ojson& message, const ojson& calls, size_t position, size_t index) {
  for (const char* key : {"tool", "name"})
    if (message.contains(key) && message[key].is_string()) return message[key].get<std::string>();
  if (calls.is_array() && position <= calls.size()) {
    const ojson& function = function_of(calls[position - 1]);
    if (function.is_object() && function.contains("name") && function["name"].is_string())
      return function["name"].get<std::string>();
  }
  fail(
      "messages[{}]: a Kimi K3 tool result needs its tool's name ('name', or a tool_call_id or position matching "
      "a call of the preceding assistant turn)",
      index);
}

std::string id_key(const ojson& id) { return id.is_string() ? id.get<std::string>() : id.dump(); }

// Each run of tool results in the order of the calls they answer (matched by tool_call_id), each
// named by its call: XTML binds a result to a call by position. A run with an unmatched result
// stays as sent.
ojson ordered_tool_results(const ojson& messages) {
  ojson out = ojson::array();
  std::map<std::string, std::pair<size_t, std::string>> calls;  // id -> (position, name)
  for (size_t i = 0; i < messages.size();) {
    const std::string role = messages[i].value("role", "");
    if (role == "assistant") {
      calls.clear();
      const ojson list = messages[i].value("tool_calls", ojson());
      for (size_t c = 0; list.is_array() && c < list.size(); ++c) {
        const ojson& function = list[c].is_object() ? function_of(list[c]) : list[c];
        if (list[c].is_object() && list[c].contains("id") && function.is_object())
          calls.emplace(id_key(list[c]["id"]), std::pair(c + 1, function.value("name", "")));
      }
    }
    if (role != "tool") {
      out.push_back(messages[i++]);
      continue;
    }
    const size_t start = i;
    std::vector<std::pair<size_t, ojson>> run;
    bool matched = true;
    for (; i < messages.size() && messages[i].value("role", "") == "tool"; ++i) {
      const ojson id = messages[i].value("tool_call_id", ojson());
      const auto found = id.is_null() ? calls.end() : calls.find(id_key(id));
      if (found == calls.end()) {
        matched = false;
        continue;
      }
      ojson result = messages[i];
      if (!found->second.second.empty()) {
        result["tool"] = found->second.second;
        if (result.contains("name")) result["name"] = found->second.second;
      }
      run.emplace_back(found->second.first, std::move(result));
    }
    if (!matched) {
      for (size_t j = start; j < i; ++j) out.push_back(messages[j]);
      continue;
    }
    std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [position, result] : run) out.push_back(std::move(result));
  }
  return out;
}

struct Options {
  bool thinking = true;
  std::string effort = "max";
};

Options options_of(const ChatInput& input) {
  Options options;
  const ojson kwargs = input.kwargs.is_object() ? input.kwargs : ojson::object();
  if (kwargs.contains("thinking")) {
    if (!kwargs["thinking"].is_boolean())
      throw ChatInputError("chat_template_kwargs", "chat_template_kwargs.thinking must be true or false");
    options.thinking = kwargs["thinking"].get<bool>();
  }
  if (input.tool_choice.is_object()) options.thinking = false;  // a named call is made at once
  std::string field = "reasoning_effort";
  if (!input.reasoning_effort.empty()) options.effort = input.reasoning_effort;
  if (kwargs.contains("thinking_effort")) {
    field = "chat_template_kwargs";
    options.effort = kwargs["thinking_effort"].is_string() ? kwargs["thinking_effort"].get<std::string>()
                                                           : kwargs["thinking_effort"].dump();
  }
  if (options.thinking && options.effort != "low" && options.effort != "high" && options.effort != "max")
    throw ChatInputError(
        field,
        fmt::format("{}: Kimi K3's thinking effort is low, high or max, got '{}'",
                    field == "reasoning_effort" ? field : "chat_template_kwargs.thinking_effort", options.effort));
  return options;
}

void conversation(Segments& out, const ojson& messages, const Options& options, bool continue_final) {
  ojson calls;  // the latest assistant turn's tool calls
  size_t tool_position = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& message = messages[i];
    MLA_CHECK(message.is_object() && message.contains("role") && message["role"].is_string(),
              "messages[{}] needs a string 'role'", i);
    std::string role = message["role"].get<std::string>();
    if (role == "developer") role = "system";
    if (role == "system" && message.contains("tools") && !message["tools"].is_null() && !message["tools"].empty()) {
      tool_declaration(out, message["tools"], true);
    } else if (role == "system" || role == "user") {
      Attributes attributes = {{"role", role}};
      if (message.contains("name") && message["name"].is_string() && !message["name"].get<std::string>().empty())
        attributes.emplace_back("name", message["name"].get<std::string>());
      open_tag(out, "message", attributes);
      content(out, message, i);
      close_message(out);
    } else if (role == "assistant") {
      calls = message.value("tool_calls", ojson());
      tool_position = 0;
      const bool open = continue_final && i + 1 == messages.size();
      MLA_CHECK(!open || !calls.is_array() || calls.empty(),
                "continue_final_message: a final message with tool calls cannot be continued");
      assistant_turn(out, message, i, options.thinking, open);
    } else if (role == "tool") {
      const std::string name = tool_name(message, calls, ++tool_position, i);
      open_tag(out, "message", {{"role", "tool"}, {"tool", name}, {"index", std::to_string(tool_position)}});
      content(out, message, i);
      close_message(out);
    } else {
      fail("messages[{}]: role '{}' is not supported by the Kimi K3 format (system, developer, user, assistant, tool)",
           i, role);
    }
  }
}

// The turns that state what this request asks of the output, after the conversation.
void request_turns(Segments& out, const ChatInput& input) {
  if (input.tool_choice == "required")
    internal_system_message(
        out, "tool-choice",
        "The system is invoked with `tool_choice=required`.\nYou MUST call tools in the next message.");
  else if (input.tool_choice == "none")
    internal_system_message(
        out, "tool-choice",
        "The system is invoked with `tool_choice=none`.\nYou MUST NOT call any tools in the next message.");
  const ojson& format = input.response_format;
  const std::string type = format.is_object() ? format.value("type", "") : "";
  const std::string raw_json =
      "Your response must be raw JSON data without markdown code blocks (```json) or any additional formatting.";
  if (type == "json_object")
    internal_system_message(out, "response-format",
                            "The system is invoked with `response_format=json_object`.\n" + raw_json);
  if (type == "json_schema") {
    const ojson spec = format.value("json_schema", ojson());
    const ojson schema = spec.is_object() ? spec.value("schema", spec.value("json_schema", spec)) : spec;
    internal_system_message(out, "response-format",
                            "The system is invoked with `response_format=json_schema`.\n" + raw_json +
                                "\nThe JSON data must match the following schema:\n```json\n" +
                                sorted_compact_json(schema) + "\n```");
  }
}

}  // namespace

KimiK3Opened kimi_k3_opened(std::string_view prompt_text) {
  for (const auto& [channel, opened] : {std::pair{"think", KimiK3Opened::Think}, {"response", KimiK3Opened::Response}})
    if (prompt_text.ends_with(std::string(kOpen) + channel + std::string(kSep))) return opened;
  return KimiK3Opened::Message;
}

std::vector<PromptSegment> render_kimi_k3(const ChatInput& input, bool open_channel) {
  MLA_CHECK(input.messages.is_array() && !input.messages.empty(), "'messages' must be a non-empty list");
  for (size_t i = 0; i < input.messages.size(); ++i)
    MLA_CHECK(
        input.messages[i].is_object() && input.messages[i].contains("role") && input.messages[i]["role"].is_string(),
        "messages[{}] needs a string 'role'", i);
  const Options options = options_of(input);
  Segments out;
  if (input.tools.is_array() && !input.tools.empty()) tool_declaration(out, input.tools, false);
  if (options.thinking)
    internal_system_message(out, "thinking-effort",
                            "`thinking_effort` guides on how much to think in your thinking channel (not including the "
                            "response channel), supported values include `low`, `medium`, `high`, and `max`.\nNow the "
                            "system is invoked with `thinking_effort=" +
                                options.effort + "`.");
  conversation(out, ordered_tool_results(input.messages), options, input.continue_final_message);
  if (input.continue_final_message) return out;
  request_turns(out, input);
  if (input.add_generation_prompt) {
    open_tag(out, "message", {{"role", "assistant"}});
    if (open_channel) open_tag(out, options.thinking ? "think" : "response");
  }
  return out;
}

}  // namespace mlaserve
