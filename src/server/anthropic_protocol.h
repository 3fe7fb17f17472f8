// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) mapped onto the request
// model: a Messages body becomes the chat request it means (the same chat template, output
// parsers, grammars and sampling), and the engine's events become Anthropic's message, its
// content blocks (thinking, text, tool_use) and its stream of typed events. Errors in Anthropic's
// shape. docs/serving.md lists the fields.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/chat_stream.h"

namespace mlaserve {

// {"type": "error", "error": {"type", "message"}}.
nlohmann::json anthropic_error_body(int status, const std::string& message);

// A Messages body as the OpenAI chat body it means (what parse_chat_request takes). Throws
// ApiError naming the field (`count_tokens`: max_tokens is not needed).
nlohmann::ordered_json messages_to_chat(const nlohmann::ordered_json& body, bool count_tokens = false);
ParsedRequest parse_messages_request(const std::string& body, const RequestContext& context);
// /v1/messages/count_tokens: the prompt's length.
int64_t count_message_tokens(const std::string& body, const RequestContext& context);

class MessageAnswer : public ChatAnswer {
 public:
  MessageAnswer(const ParsedRequest& request, std::string model);
  std::vector<std::string> stream_start() override;
  std::vector<std::string> stream_event(const StreamEvent& event) override;
  std::string stream_error(int status, const std::string& message) override;
  void add(const StreamEvent& event) override;
  nlohmann::json response() const override;
  nlohmann::json error_body(int status, const std::string& message) const override {
    return anthropic_error_body(status, message);
  }

 private:
  enum class Block { None, Thinking, Text, ToolUse };
  // What a delta adds to the content: block starts, deltas and stops as stream events.
  std::vector<nlohmann::json> block_events(const ChatDelta& delta);
  std::vector<nlohmann::json> start_block(Block kind, nlohmann::json content_block);
  nlohmann::json stop_block();
  nlohmann::json usage() const;
  std::string stop_reason() const;

  const ParsedRequest& request_;
  std::string model_, id_;
  ChatStream chat_;
  Block open_ = Block::None;
  int index_ = -1;                                    // the open block's index
  int call_ = -1;                                     // the open tool_use block's call
  nlohmann::json content_ = nlohmann::json::array();  // whole: the blocks, their text appended
  std::vector<std::string> arguments_;                // whole: each call's JSON arguments
};

}  // namespace mlaserve
