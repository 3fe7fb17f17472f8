#include "server/anthropic_protocol.h"

#include <fmt/format.h>

#include "server/openai_protocol.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

const char* anthropic_error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return "api_error";
  }
}

[[noreturn]] void refuse(const std::string& field, const std::string& message) { throw ApiError(400, message, field); }

// A text block as an OpenAI text part; images and documents are refused by name.
ojson text_part(const ojson& block, const std::string& where, const std::string& field = "messages") {
  const std::string type = block.is_object() ? block.value("type", "") : "";
  if (type == "image" || type == "document")
    refuse(field,
           fmt::format("{}: {} blocks are not supported: the model is served without its vision tower", where, type));
  if (type != "text" || !block.contains("text") || !block["text"].is_string())
    refuse(field, fmt::format("{} must be a text block ({{\"type\": \"text\", \"text\"}})", where));
  return {{"type", "text"}, {"text", block["text"]}};
}

ojson text_parts(const ojson& blocks, const std::string& where, const std::string& field = "messages") {
  ojson parts = ojson::array();
  for (size_t i = 0; i < blocks.size(); ++i)
    parts.push_back(text_part(blocks[i], fmt::format("{}[{}]", where, i), field));
  return parts;
}

ojson tool_result(const ojson& block, const std::string& where) {
  if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string())
    refuse("messages", where + ": a tool_result needs a string 'tool_use_id'");
  const ojson content = block.value("content", ojson(""));
  if (!content.is_string() && !content.is_array())
    refuse("messages", where + ".content must be a string or a list of text blocks");
  return {{"role", "tool"},
          {"tool_call_id", block["tool_use_id"]},
          {"content", content.is_string() ? content : text_parts(content, where + ".content")}};
}

// An assistant's tool_use block as an OpenAI tool call (arguments: its input as JSON text).
ojson tool_call(const ojson& block, const std::string& where) {
  if (!block.contains("id") || !block["id"].is_string() || !block.contains("name") || !block["name"].is_string())
    refuse("messages", where + ": a tool_use needs a string 'id' and 'name'");
  const ojson input = block.value("input", ojson::object());
  if (!input.is_object()) refuse("messages", where + ".input must be an object");
  return {
      {"id", block["id"]}, {"type", "function"}, {"function", {{"name", block["name"]}, {"arguments", input.dump()}}}};
}

// One Messages turn as OpenAI messages: a user turn's tool results first (each a tool message),
// then its text; an assistant turn's thinking, text and tool calls in one message.
void add_turn(const ojson& message, size_t index, ojson& out) {
  const std::string where = fmt::format("messages[{}]", index);
  if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
    refuse("messages", where + " needs a 'role' (user or assistant)");
  const std::string role = message["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    refuse("messages", where + ".role must be user or assistant, got '" + role + "'");
  const ojson content = message.value("content", ojson());
  if (content.is_string()) return out.push_back({{"role", role}, {"content", content}});
  if (!content.is_array()) refuse("messages", where + ".content must be a string or a list of content blocks");
  ojson text = ojson::array(), calls = ojson::array();
  std::string reasoning;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& block = content[i];
    const std::string at = fmt::format("{}.content[{}]", where, i);
    const std::string type = block.is_object() ? block.value("type", "") : "";
    if (type == "text" || type == "image" || type == "document") {
      text.push_back(text_part(block, at));
    } else if (type == "tool_result" && role == "user") {
      out.push_back(tool_result(block, at));
    } else if (type == "tool_use" && role == "assistant") {
      calls.push_back(tool_call(block, at));
    } else if (type == "thinking" && role == "assistant") {
      reasoning += block.value("thinking", "");
    } else if (type != "redacted_thinking" || role != "assistant") {
      refuse("messages", fmt::format("{}: a {} turn cannot hold a block of type '{}'", at, role, type));
    }
  }
  if (role == "user" && text.empty()) return;
  ojson turn = {{"role", role}, {"content", text.empty() ? ojson() : text}};
  if (!reasoning.empty()) turn["reasoning_content"] = reasoning;
  if (!calls.empty()) turn["tool_calls"] = calls;
  out.push_back(turn);
}

ojson system_message(const ojson& system) {
  if (system.is_string()) return {{"role", "system"}, {"content", system}};
  if (!system.is_array()) refuse("system", "'system' must be a string or a list of text blocks");
  return {{"role", "system"}, {"content", text_parts(system, "system", "system")}};
}

ojson tools_of(const ojson& tools) {
  if (!tools.is_array()) refuse("tools", "'tools' must be a list");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
      refuse("tools", fmt::format("tools[{}] needs a string 'name'", i));
    const std::string type = tool.value("type", "custom");
    if (type != "custom")
      refuse("tools",
             fmt::format("tools[{}]: server tools ('{}') are not supported; define a custom tool with input_schema", i,
                         type));
    ojson function = {{"name", tool["name"]}, {"parameters", tool.value("input_schema", ojson({{"type", "object"}}))}};
    if (tool.contains("description")) function["description"] = tool["description"];
    out.push_back({{"type", "function"}, {"function", function}});
  }
  return out;
}

// tool_choice {"type": auto | any | tool (with name) | none, "disable_parallel_tool_use"}.
void add_tool_choice(const ojson& choice, ojson& chat) {
  const std::string type = choice.is_object() ? choice.value("type", "") : "";
  if (type == "auto" || type == "none")
    chat["tool_choice"] = type;
  else if (type == "any")
    chat["tool_choice"] = "required";
  else if (type == "tool" && choice.contains("name") && choice["name"].is_string())
    chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  else
    refuse("tool_choice",
           "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\"}");
  if (choice.value("disable_parallel_tool_use", false) == true) chat["parallel_tool_calls"] = false;
}

// thinking {"type": "enabled", "budget_tokens"} or {"type": "disabled"}: the templates' switch
// (`thinking` for DeepSeek-V3.1 and Kimi K3, `enable_thinking` for others).
void add_thinking(const ojson& thinking, ojson& chat) {
  const std::string type = thinking.is_object() ? thinking.value("type", "") : "";
  if (type != "enabled" && type != "disabled")
    refuse("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\"} or {\"type\": \"disabled\"}");
  if (type == "enabled" && !(thinking.contains("budget_tokens") && thinking["budget_tokens"].is_number_integer()))
    refuse("thinking", "'thinking' enabled needs an integer 'budget_tokens'");
  ojson kwargs = chat.value("chat_template_kwargs", ojson::object());
  kwargs["thinking"] = type == "enabled";
  kwargs["enable_thinking"] = type == "enabled";
  chat["chat_template_kwargs"] = kwargs;
}

}  // namespace

json anthropic_error_body(int status, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
}

ojson messages_to_chat(const ojson& body, bool count_tokens) {
  ojson chat = ojson::object();
  for (const char* key : {"model", "temperature", "top_p", "top_k", "stream"})
    if (body.contains(key)) chat[key] = body[key];
  if (!count_tokens) {
    if (!body.contains("max_tokens")) refuse("max_tokens", "'max_tokens' is required");
    chat["max_tokens"] = body["max_tokens"];
  }
  if (body.contains("temperature") && body["temperature"].is_number() && body["temperature"].get<double>() > 1.0)
    refuse("temperature", "'temperature' must be in [0, 1]");
  if (!body.contains("messages") || !body["messages"].is_array() || body["messages"].empty())
    refuse("messages", "'messages' must be a non-empty list");
  ojson messages = ojson::array();
  if (body.contains("system") && !body["system"].is_null()) messages.push_back(system_message(body["system"]));
  for (size_t i = 0; i < body["messages"].size(); ++i) add_turn(body["messages"][i], i, messages);
  chat["messages"] = messages;
  if (body.contains("tools") && !body["tools"].is_null()) chat["tools"] = tools_of(body["tools"]);
  if (body.contains("tool_choice") && !body["tool_choice"].is_null()) add_tool_choice(body["tool_choice"], chat);
  if (body.contains("thinking") && !body["thinking"].is_null()) add_thinking(body["thinking"], chat);
  if (body.contains("stop_sequences") && !body["stop_sequences"].is_null()) {
    if (!body["stop_sequences"].is_array()) refuse("stop_sequences", "'stop_sequences' must be a list of strings");
    chat["stop"] = body["stop_sequences"];
  }
  return chat;
}

ParsedRequest parse_messages_request(const std::string& raw, const RequestContext& context) {
  try {
    return parse_chat_request(messages_to_chat(request_body(raw)), context);
  } catch (const ojson::exception& e) {
    throw ApiError(400, fmt::format("malformed request: {}", e.what()));
  }
}

int64_t count_message_tokens(const std::string& raw, const RequestContext& context) {
  try {
    ojson chat = messages_to_chat(request_body(raw), true);
    chat.erase("stream");
    return int64_t(parse_chat_request(chat, context).engine.prompt.size());
  } catch (const ojson::exception& e) {
    throw ApiError(400, fmt::format("malformed request: {}", e.what()));
  }
}

MessageAnswer::MessageAnswer(const ParsedRequest& request, std::string model)
    : request_(request), model_(std::move(model)), id_(random_id("msg_")), chat_(request, "toolu_") {}

std::vector<json> MessageAnswer::start_block(Block kind, json content_block) {
  std::vector<json> events;
  if (open_ != Block::None) events.push_back(stop_block());
  open_ = kind;
  events.push_back({{"type", "content_block_start"}, {"index", ++index_}, {"content_block", std::move(content_block)}});
  return events;
}

json MessageAnswer::stop_block() {
  open_ = Block::None;
  return {{"type", "content_block_stop"}, {"index", index_}};
}

std::vector<json> MessageAnswer::block_events(const ChatDelta& delta) {
  std::vector<json> events;
  auto add = [&](std::vector<json> more) { events.insert(events.end(), more.begin(), more.end()); };
  auto block_delta = [&](json value) {
    events.push_back({{"type", "content_block_delta"}, {"index", index_}, {"delta", value}});
  };
  if (!delta.reasoning.empty()) {
    if (open_ != Block::Thinking)
      add(start_block(Block::Thinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}));
    block_delta({{"type", "thinking_delta"}, {"thinking", delta.reasoning}});
  }
  if (!delta.content.empty()) {
    if (open_ != Block::Text) add(start_block(Block::Text, {{"type", "text"}, {"text", ""}}));
    block_delta({{"type", "text_delta"}, {"text", delta.content}});
  }
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (!call.name.empty() || open_ != Block::ToolUse || call_ != call.index) {
      add(start_block(
          Block::ToolUse,
          {{"type", "tool_use"}, {"id", chat_.call_id(call.index)}, {"name", call.name}, {"input", json::object()}}));
      call_ = call.index;
    }
    if (!call.arguments.empty()) block_delta({{"type", "input_json_delta"}, {"partial_json", call.arguments}});
  }
  return events;
}

std::string MessageAnswer::stop_reason() const {
  const StreamEvent& last = chat_.final_event();
  if (last.finish_reason == "length") return "max_tokens";
  if (!last.stop_string.empty()) return "stop_sequence";
  return chat_.calls() > 0 ? "tool_use" : "end_turn";
}

// Anthropic counts input as what was computed, read from the cache and written to it.
json MessageAnswer::usage() const {
  const StreamEvent& last = chat_.final_event();
  return {{"input_tokens", last.prompt_tokens - last.cached_tokens},
          {"output_tokens", last.completion_tokens},
          {"cache_read_input_tokens", last.cached_tokens},
          {"cache_creation_input_tokens", 0}};
}

namespace {

std::string sse(const json& event) {
  return "event: " + event["type"].get<std::string>() +
         "\ndata: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

std::vector<std::string> MessageAnswer::stream_start() {
  const json message = {{"id", id_},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"model", model_},
                        {"content", json::array()},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", request_.engine.prompt.size()}, {"output_tokens", 0}}}};
  return {sse({{"type", "message_start"}, {"message", message}}), sse({{"type", "ping"}})};
}

std::vector<std::string> MessageAnswer::stream_event(const StreamEvent& event) {
  std::vector<std::string> frames;
  for (const json& e : block_events(chat_.next(event))) frames.push_back(sse(e));
  if (!event.finished) return frames;
  if (open_ != Block::None) frames.push_back(sse(stop_block()));
  const json stop_sequence = event.stop_string.empty() ? json() : json(event.stop_string);
  frames.push_back(sse({{"type", "message_delta"},
                        {"delta", {{"stop_reason", stop_reason()}, {"stop_sequence", stop_sequence}}},
                        {"usage", usage()}}));
  frames.push_back(sse({{"type", "message_stop"}}));
  return frames;
}

std::string MessageAnswer::stream_error(int status, const std::string& message) {
  return sse(anthropic_error_body(status, message));
}

void MessageAnswer::add(const StreamEvent& event) {
  for (const json& e : block_events(chat_.next(event))) {
    if (e["type"] == "content_block_start") {
      content_.push_back(e["content_block"]);
      if (e["content_block"]["type"] == "tool_use") arguments_.emplace_back();
      continue;
    }
    if (e["type"] != "content_block_delta") continue;
    const json& delta = e["delta"];
    json& block = content_.back();
    if (delta["type"] == "thinking_delta")
      block["thinking"] = block["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
    if (delta["type"] == "text_delta")
      block["text"] = block["text"].get<std::string>() + delta["text"].get<std::string>();
    if (delta["type"] == "input_json_delta") arguments_.back() += delta["partial_json"].get<std::string>();
  }
}

// A call's input is its arguments as an object ({} when the output was cut off mid-call).
json MessageAnswer::response() const {
  json content = content_;
  size_t call = 0;
  for (json& block : content) {
    if (block["type"] != "tool_use") continue;
    const json input = json::parse(arguments_[call++], nullptr, false);
    block["input"] = input.is_object() ? input : json::object();
  }
  const StreamEvent& last = chat_.final_event();
  return {{"id", id_},
          {"type", "message"},
          {"role", "assistant"},
          {"model", model_},
          {"content", content},
          {"stop_reason", stop_reason()},
          {"stop_sequence", last.stop_string.empty() ? json() : json(last.stop_string)},
          {"usage", usage()}};
}

}  // namespace mlaserve
