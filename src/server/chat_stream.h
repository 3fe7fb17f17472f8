// One choice of a chat request as its output streams, whatever the wire protocol answers it: the
// engine's events through the request's output handling (the whole output a named call's
// arguments, a required call list read at the end, or reasoning, content and calls parsed from
// the model's markup), an id for each call, and the counts and reason the output ended with.
// OpenAI's chat completions, Anthropic's messages and OpenAI's responses format from it.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "server/chat_request.h"

namespace mlaserve {

class ChatStream {
 public:
  // Calls without an id of the model's own get `call_id_prefix` and 16 random hex digits.
  explicit ChatStream(const ParsedRequest& request, std::string call_id_prefix = "call_");
  // This event's reasoning, content and tool calls (a call's first step carries its name).
  ChatDelta next(const StreamEvent& event);
  const std::string& call_id(int index) const { return call_ids_[size_t(index)]; }
  int calls() const { return int(call_ids_.size()); }
  // Once finished: the final event (its counts), and its reason, "tool_calls" for a turn that
  // ended on its stop token after calling tools.
  const StreamEvent& final_event() const { return final_; }
  std::string finish_reason() const;

 private:
  ChatDelta required_calls(const StreamEvent& event);
  const ParsedRequest& request_;
  std::string call_id_prefix_;
  std::optional<ChatOutputParser> parser_;
  std::string required_text_;          // tool_choice required: the output so far
  std::vector<std::string> call_ids_;  // by tool call index
  StreamEvent final_;
};

// A wire protocol's answer to one chat request (Anthropic's message, OpenAI's response) from the
// engine's events: a stream of server-sent events, or the whole response; errors in its shape.
class ChatAnswer {
 public:
  virtual ~ChatAnswer() = default;
  virtual std::vector<std::string> stream_start() = 0;  // SSE frames ("event: ...\ndata: ...\n\n")
  virtual std::vector<std::string> stream_event(const StreamEvent& event) = 0;
  virtual std::string stream_error(int status, const std::string& message) = 0;
  virtual void add(const StreamEvent& event) = 0;  // the whole response: add every event, then response()
  virtual nlohmann::json response() const = 0;
  virtual nlohmann::json error_body(int status, const std::string& message) const = 0;
};

// A random id: `prefix` and 16 hex digits.
std::string random_id(const char* prefix);

}  // namespace mlaserve
