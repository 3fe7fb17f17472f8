#include "server/responses_protocol.h"

#include <fmt/format.h>

#include <chrono>

#include "server/openai_protocol.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

[[noreturn]] void bad_field(const std::string& field, const std::string& message) {
  throw ApiError(400, message, field);
}

// A message's content as chat content: a string, or its text parts (input_text, output_text).
ojson item_content(const ojson& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad_field("input", where + ".content must be a string or a list of parts");
  ojson parts = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string type = part.is_object() ? part.value("type", "") : "";
    if (type == "input_image" || type == "input_file" || type == "input_audio")
      bad_field("input",
                fmt::format("{}.content[{}]: {} is not supported: the model is served without its vision tower", where,
                            i, type));
    if (type == "refusal") continue;
    if ((type != "input_text" && type != "output_text") || !part.contains("text") || !part["text"].is_string())
      bad_field("input", fmt::format("{}.content[{}] must be an input_text or output_text part", where, i));
    parts.push_back({{"type", "text"}, {"text", part["text"]}});
  }
  return parts;
}

// The reasoning an item carries: its reasoning_text content, else its summary.
std::string item_reasoning(const ojson& item) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    for (const auto& part : item.value(key, ojson::array()))
      if (part.is_object() && part.contains("text") && part["text"].is_string())
        text += part["text"].get<std::string>();
    if (!text.empty()) break;
  }
  return text;
}

// One input item onto the chat messages: a message; a function call (joining the assistant
// turn it follows); a call's output (a tool message); reasoning, for the next assistant turn.
void add_item(const ojson& item, size_t index, ojson& messages, std::string& reasoning) {
  const std::string where = fmt::format("input[{}]", index);
  if (!item.is_object()) bad_field("input", where + " must be an object");
  const std::string type = item.value("type", "message");
  if (type == "message") {
    std::string role = item.value("role", "");
    if (role != "user" && role != "system" && role != "developer" && role != "assistant")
      bad_field("input", where + ".role must be user, system, developer or assistant");
    ojson message = {{"role", role}, {"content", item_content(item.value("content", ojson("")), where)}};
    if (role == "assistant" && !reasoning.empty()) message["reasoning_content"] = std::exchange(reasoning, "");
    messages.push_back(message);
  } else if (type == "function_call") {
    for (const char* key : {"call_id", "name", "arguments"})
      if (!item.contains(key) || !item[key].is_string())
        bad_field("input", fmt::format("{}: a function_call needs a string '{}'", where, key));
    const ojson call = {{"id", item["call_id"]},
                        {"type", "function"},
                        {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
    if (messages.empty() || messages.back()["role"] != "assistant") {
      messages.push_back({{"role", "assistant"}, {"content", nullptr}});
      if (!reasoning.empty()) messages.back()["reasoning_content"] = std::exchange(reasoning, "");
    }
    if (!messages.back().contains("tool_calls")) messages.back()["tool_calls"] = ojson::array();
    messages.back()["tool_calls"].push_back(call);
  } else if (type == "function_call_output") {
    if (!item.contains("call_id") || !item["call_id"].is_string())
      bad_field("input", where + ": a function_call_output needs a string 'call_id'");
    const ojson output = item.value("output", ojson(""));
    messages.push_back(
        {{"role", "tool"}, {"tool_call_id", item["call_id"]}, {"content", item_content(output, where + ".output")}});
  } else if (type == "reasoning") {
    reasoning += item_reasoning(item);
  } else {
    bad_field("input",
              fmt::format(
                  "{}: items of type '{}' are not supported (message, function_call, function_call_output, reasoning)",
                  where, type));
  }
}

ojson function_tools(const ojson& tools) {
  if (!tools.is_array()) bad_field("tools", "'tools' must be a list");
  ojson out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& tool = tools[i];
    if (!tool.is_object() || tool.value("type", "") != "function")
      bad_field("tools", fmt::format("tools[{}]: only function tools are supported", i));
    if (!tool.contains("name") || !tool["name"].is_string())
      bad_field("tools", fmt::format("tools[{}] needs a string 'name'", i));
    ojson function = {{"name", tool["name"]}, {"parameters", tool.value("parameters", ojson({{"type", "object"}}))}};
    if (tool.contains("description") && !tool["description"].is_null()) function["description"] = tool["description"];
    out.push_back({{"type", "function"}, {"function", function}});
  }
  return out;
}

ojson responses_tool_choice(const ojson& choice) {
  if (choice == "auto" || choice == "none" || choice == "required") return choice;
  if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name") &&
      choice["name"].is_string())
    return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  bad_field("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\"}");
}

// text.format {"type": "text" | "json_object" | "json_schema" (with name, schema, strict)}.
void add_text_format(const ojson& text, ojson& chat) {
  const ojson format = text.is_object() ? text.value("format", ojson()) : ojson();
  if (format.is_null()) return;
  const std::string type = format.is_object() ? format.value("type", "") : "";
  if (type == "text") return;
  if (type == "json_object")
    chat["response_format"] = {{"type", "json_object"}};
  else if (type == "json_schema" && format.contains("schema"))
    chat["response_format"] = {
        {"type", "json_schema"},
        {"json_schema", {{"name", format.value("name", "response")}, {"schema", format["schema"]}}}};
  else
    bad_field("text",
              "'text.format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", "
              "\"schema\"}");
}

}  // namespace

void ResponseStore::put(const std::string& id, json response, ojson conversation) {
  std::lock_guard lock(mutex_);
  if (entries_.emplace(id, Entry{std::move(response), std::move(conversation)}).second) order_.push_back(id);
  while (order_.size() > capacity_) {
    entries_.erase(order_.front());
    order_.pop_front();
  }
}

std::optional<json> ResponseStore::response(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(id);
  return found == entries_.end() ? std::nullopt : std::optional(found->second.response);
}

std::optional<ojson> ResponseStore::conversation(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto found = entries_.find(id);
  return found == entries_.end() ? std::nullopt : std::optional(found->second.conversation);
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  if (!entries_.erase(id)) return false;
  order_.erase(std::find(order_.begin(), order_.end(), id));
  return true;
}

ResponsesRequest responses_to_chat(const ojson& body, const ResponseStore& store) {
  ResponsesRequest out;
  ojson& chat = out.chat = ojson::object();
  for (const char* key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls"})
    if (body.contains(key) && !body[key].is_null()) chat[key] = body[key];
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null())
    chat["max_tokens"] = body["max_output_tokens"];
  ojson messages = ojson::array();
  const ojson previous = body.value("previous_response_id", ojson());
  if (!previous.is_null()) {
    if (!previous.is_string()) bad_field("previous_response_id", "'previous_response_id' must be a string");
    const auto conversation = store.conversation(previous.get<std::string>());
    if (!conversation)
      throw ApiError(404, fmt::format("Previous response with id '{}' not found.", previous.get<std::string>()),
                     "previous_response_id");
    messages = *conversation;
  }
  const ojson input = body.value("input", ojson());
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    std::string reasoning;
    for (size_t i = 0; i < input.size(); ++i) add_item(input[i], i, messages, reasoning);
  } else {
    bad_field("input", "'input' must be a string or a list of items");
  }
  out.conversation = messages;
  const ojson instructions = body.value("instructions", ojson());
  if (!instructions.is_null()) {
    if (!instructions.is_string()) bad_field("instructions", "'instructions' must be a string");
    messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", instructions}});
  }
  if (messages.empty()) bad_field("input", "'input' holds no message");
  chat["messages"] = messages;
  if (body.contains("tools") && !body["tools"].is_null()) chat["tools"] = function_tools(body["tools"]);
  if (body.contains("tool_choice") && !body["tool_choice"].is_null())
    chat["tool_choice"] = responses_tool_choice(body["tool_choice"]);
  if (body.contains("text") && !body["text"].is_null()) add_text_format(body["text"], chat);
  const ojson reasoning = body.value("reasoning", ojson());
  // reasoning.effort "none" turns a thinking template's thinking off; other efforts are passed on.
  if (reasoning.is_object() && reasoning.contains("effort") && !reasoning["effort"].is_null()) {
    if (reasoning["effort"] == "none")
      chat["chat_template_kwargs"] = {{"thinking", false}, {"enable_thinking", false}};
    else
      chat["reasoning_effort"] = reasoning["effort"];
  }
  if (body.contains("store") && !body["store"].is_boolean()) bad_field("store", "'store' must be true or false");
  out.store = body.value("store", true);
  json& echo = out.echo = json::object();
  for (const char* key :
       {"instructions", "max_output_tokens", "previous_response_id", "reasoning", "temperature", "top_p", "metadata"})
    echo[key] = body.contains(key) ? json(body[key]) : json();
  echo["tools"] = body.contains("tools") ? json(body["tools"]) : json::array();
  echo["tool_choice"] = body.contains("tool_choice") ? json(body["tool_choice"]) : json("auto");
  echo["parallel_tool_calls"] = body.value("parallel_tool_calls", true);
  echo["text"] = body.contains("text") ? json(body["text"]) : json({{"format", {{"type", "text"}}}});
  echo["store"] = out.store;
  return out;
}

ResponseAnswer::ResponseAnswer(const ParsedRequest& request, ResponsesRequest responses, std::string model,
                               ResponseStore& store)
    : request_(request),
      responses_(std::move(responses)),
      model_(std::move(model)),
      id_(random_id("resp_")),
      store_(store),
      chat_(request),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

json ResponseAnswer::error_body(int status, const std::string& message) const {
  return mlaserve::error_body(status, message);
}

std::vector<json> ResponseAnswer::open_item(const std::string& type, json item) {
  std::vector<json> events = close_item();
  open_ = type;
  output_.push_back(item);
  const size_t index = output_.size() - 1;
  events.push_back({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  if (type == "function_call") return events;
  const json part = type == "message" ? json{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}
                                      : json{{"type", "reasoning_text"}, {"text", ""}};
  output_.back()["content"].push_back(part);
  events.push_back({{"type", "response.content_part.added"},
                    {"item_id", item["id"]},
                    {"output_index", index},
                    {"content_index", 0},
                    {"part", part}});
  return events;
}

std::vector<json> ResponseAnswer::close_item() {
  if (open_.empty()) return {};
  json& item = output_.back();
  const size_t index = output_.size() - 1;
  std::vector<json> events;
  if (open_ == "function_call") {
    events.push_back({{"type", "response.function_call_arguments.done"},
                      {"item_id", item["id"]},
                      {"output_index", index},
                      {"arguments", item["arguments"]}});
  } else {
    const json& part = item["content"][0];
    events.push_back({{"type", open_ == "message" ? "response.output_text.done" : "response.reasoning_text.done"},
                      {"item_id", item["id"]},
                      {"output_index", index},
                      {"content_index", 0},
                      {"text", part["text"]}});
    events.push_back({{"type", "response.content_part.done"},
                      {"item_id", item["id"]},
                      {"output_index", index},
                      {"content_index", 0},
                      {"part", part}});
  }
  if (item.contains("status")) item["status"] = "completed";
  events.push_back({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  open_.clear();
  return events;
}

std::vector<json> ResponseAnswer::item_events(const ChatDelta& delta) {
  std::vector<json> events;
  auto add = [&](std::vector<json> more) { events.insert(events.end(), more.begin(), more.end()); };
  auto text_delta = [&](const char* type, const std::string& text) {
    json& part = output_.back()["content"][0];
    part["text"] = part["text"].get<std::string>() + text;
    events.push_back({{"type", type},
                      {"item_id", output_.back()["id"]},
                      {"output_index", output_.size() - 1},
                      {"content_index", 0},
                      {"delta", text}});
  };
  if (!delta.reasoning.empty()) {
    if (open_ != "reasoning")
      add(open_item(
          "reasoning",
          {{"type", "reasoning"}, {"id", random_id("rs_")}, {"summary", json::array()}, {"content", json::array()}}));
    text_delta("response.reasoning_text.delta", delta.reasoning);
  }
  if (!delta.content.empty()) {
    if (open_ != "message")
      add(open_item("message", {{"type", "message"},
                                {"id", random_id("msg_")},
                                {"status", "in_progress"},
                                {"role", "assistant"},
                                {"content", json::array()}}));
    text_delta("response.output_text.delta", delta.content);
  }
  for (const ToolCallDelta& call : delta.tool_calls) {
    if (!call.name.empty() || open_ != "function_call" || open_call_ != call.index) {
      add(open_item("function_call", {{"type", "function_call"},
                                      {"id", random_id("fc_")},
                                      {"call_id", chat_.call_id(call.index)},
                                      {"name", call.name},
                                      {"arguments", ""},
                                      {"status", "in_progress"}}));
      open_call_ = call.index;
    }
    if (call.arguments.empty()) continue;
    output_.back()["arguments"] = output_.back()["arguments"].get<std::string>() + call.arguments;
    events.push_back({{"type", "response.function_call_arguments.delta"},
                      {"item_id", output_.back()["id"]},
                      {"output_index", output_.size() - 1},
                      {"delta", call.arguments}});
  }
  return events;
}

json ResponseAnswer::snapshot(const std::string& status) const {
  json response = {{"id", id_},       {"object", "response"}, {"created_at", created_}, {"status", status},
                   {"model", model_}, {"output", output_},    {"error", nullptr},       {"incomplete_details", nullptr},
                   {"usage", nullptr}};
  response.update(responses_.echo);
  return response;
}

// The finished response: its status and usage; kept for previous_response_id and GET (with the
// conversation it ends, the output as the assistant's turn) unless store is false.
void ResponseAnswer::finish(const StreamEvent& event) {
  final_ = snapshot(event.finish_reason == "length" ? "incomplete" : "completed");
  if (event.finish_reason == "length") final_["incomplete_details"] = {{"reason", "max_output_tokens"}};
  final_["usage"] = {{"input_tokens", event.prompt_tokens},
                     {"input_tokens_details", {{"cached_tokens", event.cached_tokens}}},
                     {"output_tokens", event.completion_tokens},
                     {"output_tokens_details", {{"reasoning_tokens", 0}}},
                     {"total_tokens", event.prompt_tokens + event.completion_tokens}};
  if (!responses_.store) return;
  ojson turn = {{"role", "assistant"}, {"content", nullptr}};
  for (const json& item : output_) {
    if (item["type"] == "reasoning") turn["reasoning_content"] = item["content"][0]["text"];
    if (item["type"] == "message") turn["content"] = item["content"][0]["text"];
    if (item["type"] != "function_call") continue;
    if (!turn.contains("tool_calls")) turn["tool_calls"] = ojson::array();
    turn["tool_calls"].push_back({{"id", item["call_id"]},
                                  {"type", "function"},
                                  {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
  }
  ojson conversation = responses_.conversation;
  conversation.push_back(turn);
  store_.put(id_, final_, std::move(conversation));
}

std::string ResponseAnswer::frame(json event) {
  event["sequence_number"] = sequence_++;
  return "event: " + event["type"].get<std::string>() +
         "\ndata: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::vector<std::string> ResponseAnswer::stream_start() {
  const json response = snapshot("in_progress");
  return {frame({{"type", "response.created"}, {"response", response}}),
          frame({{"type", "response.in_progress"}, {"response", response}})};
}

std::vector<std::string> ResponseAnswer::stream_event(const StreamEvent& event) {
  std::vector<std::string> frames;
  for (json& e : item_events(chat_.next(event))) frames.push_back(frame(std::move(e)));
  if (!event.finished) return frames;
  for (json& e : close_item()) frames.push_back(frame(std::move(e)));
  finish(event);
  frames.push_back(frame({{"type", final_["status"] == "completed" ? "response.completed" : "response.incomplete"},
                          {"response", final_}}));
  return frames;
}

std::string ResponseAnswer::stream_error(int status, const std::string& message) {
  return frame({{"type", "error"}, {"code", status}, {"message", message}, {"param", nullptr}});
}

void ResponseAnswer::add(const StreamEvent& event) {
  item_events(chat_.next(event));
  if (!event.finished) return;
  close_item();
  finish(event);
}

json ResponseAnswer::response() const { return final_; }

}  // namespace mlaserve
