#include "server/chat_stream.h"

#include <fmt/format.h>

#include <random>

namespace mlaserve {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return fmt::format("{}{:016x}", prefix, rng());
}

ChatStream::ChatStream(const ParsedRequest& request, std::string call_id_prefix)
    : request_(request), call_id_prefix_(std::move(call_id_prefix)) {
  if (request.parsing.reasoning || request.parsing.tools || request.parsing.kimi_k3)
    parser_.emplace(request.parsing, request.prompt_end);
}

// tool_choice required: the JSON list of calls, read whole at the end (text that does not
// parse, as when max_tokens cut it, stays content).
ChatDelta ChatStream::required_calls(const StreamEvent& event) {
  ChatDelta delta;
  required_text_ += event.text;
  if (!event.finished) return delta;
  const auto calls = nlohmann::ordered_json::parse(required_text_, nullptr, false);
  if (!calls.is_array()) {
    delta.content = required_text_;
    return delta;
  }
  for (size_t i = 0; i < calls.size(); ++i)
    delta.tool_calls.push_back({int(i), "", calls[i]["name"].get<std::string>(), calls[i]["parameters"].dump()});
  return delta;
}

ChatDelta ChatStream::next(const StreamEvent& event) {
  ChatDelta delta;
  if (!request_.forced_tool.empty()) {  // the output is the arguments
    if (call_ids_.empty() || !event.text.empty())
      delta.tool_calls.push_back({0, "", call_ids_.empty() ? request_.forced_tool : "", event.text});
  } else if (request_.required_tool_calls) {
    delta = required_calls(event);
  } else if (parser_) {
    delta = parser_->feed(event.text);
    if (event.finished) delta.append(parser_->finish());
  } else {
    delta.content = event.text;
  }
  if (!request_.parallel_tool_calls)
    std::erase_if(delta.tool_calls, [](const ToolCallDelta& call) { return call.index > 0; });
  for (const auto& call : delta.tool_calls)
    if (size_t(call.index) >= call_ids_.size())
      call_ids_.push_back(call.id.empty() ? random_id(call_id_prefix_.c_str()) : call.id);
  if (event.finished) final_ = event;
  return delta;
}

std::string ChatStream::finish_reason() const {
  return final_.finish_reason == "stop" && !call_ids_.empty() ? "tool_calls" : final_.finish_reason;
}

}  // namespace mlaserve
