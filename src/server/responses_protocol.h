// OpenAI's Responses API (/v1/responses, GET and DELETE /v1/responses/{id}) mapped onto the
// request model: the input items (messages, function calls and their outputs, reasoning) and
// instructions become the chat request they mean, after the stored conversation of
// previous_response_id; the engine's events become the response's output items (reasoning,
// message, function_call) and its stream of typed events. Responses are kept in memory (a
// bounded number, the oldest dropped) for previous_response_id and GET. docs/serving.md lists
// the fields.
#pragma once
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/chat_request.h"
#include "server/chat_stream.h"

namespace mlaserve {

// Stored responses: each one's object and the conversation it continues (the chat messages of
// its input and output, without its instructions). Thread-safe.
class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity = 1024) : capacity_(capacity) {}
  void put(const std::string& id, nlohmann::json response, nlohmann::ordered_json conversation);
  std::optional<nlohmann::json> response(const std::string& id) const;
  std::optional<nlohmann::ordered_json> conversation(const std::string& id) const;
  bool erase(const std::string& id);

 private:
  struct Entry {
    nlohmann::json response;
    nlohmann::ordered_json conversation;
  };
  size_t capacity_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  std::deque<std::string> order_;  // oldest first
};

// A Responses request: the chat body it means and what the response echoes and stores.
struct ResponsesRequest {
  nlohmann::ordered_json chat;          // OpenAI chat body (parse_chat_request)
  nlohmann::ordered_json conversation;  // its messages without the instructions
  nlohmann::json echo;                  // the request fields the response object repeats
  bool store = true;
};

// Throws ApiError naming the field; 404 for an unknown previous_response_id.
ResponsesRequest responses_to_chat(const nlohmann::ordered_json& body, const ResponseStore& store);

class ResponseAnswer : public ChatAnswer {
 public:
  ResponseAnswer(const ParsedRequest& request, ResponsesRequest responses, std::string model, ResponseStore& store);
  std::vector<std::string> stream_start() override;
  std::vector<std::string> stream_event(const StreamEvent& event) override;
  std::string stream_error(int status, const std::string& message) override;
  void add(const StreamEvent& event) override;
  nlohmann::json response() const override;
  nlohmann::json error_body(int status, const std::string& message) const override;

 private:
  // The output items a delta starts or extends, as stream events (without sequence numbers).
  std::vector<nlohmann::json> item_events(const ChatDelta& delta);
  std::vector<nlohmann::json> open_item(const std::string& type, nlohmann::json item);
  std::vector<nlohmann::json> close_item();
  nlohmann::json snapshot(const std::string& status) const;
  std::string frame(nlohmann::json event);
  void finish(const StreamEvent& event);  // the final status, and the response stored

  const ParsedRequest& request_;
  ResponsesRequest responses_;
  std::string model_, id_;
  ResponseStore& store_;
  ChatStream chat_;
  int64_t created_;
  nlohmann::json output_ = nlohmann::json::array();  // the items so far
  std::string open_;                                 // the type of the item being written ("" none)
  int open_call_ = -1;                               // its call, for a function_call
  int64_t sequence_ = 0;                             // the next event's sequence_number
  nlohmann::json final_;                             // the finished response
};

}  // namespace mlaserve
