// OpenAI-compatible request parsing and response building for /v1/completions and
// /v1/chat/completions: the wire protocol mapped onto the request model of chat_request.h.
// Every malformed field is an ApiError naming the parameter.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/chat_request.h"
#include "server/chat_stream.h"

namespace mlaserve {

// {"error": {"message", "type", "param", "code"}} in OpenAI's shape.
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "");

// `body` is the raw HTTP body.
ParsedRequest parse_request(Endpoint endpoint, const std::string& body, const RequestContext& context);
// The raw body as a JSON object (nesting bounded), else an ApiError.
nlohmann::ordered_json request_body(const std::string& raw);
// A chat request given as OpenAI's body: what the other protocols map theirs onto.
ParsedRequest parse_chat_request(const nlohmann::ordered_json& body, const RequestContext& context);

// vLLM's /tokenize body: {"prompt", "add_special_tokens"} or {"messages", "add_generation_prompt",
// "tools", "chat_template_kwargs", ...}: the ids; /detokenize's {"tokens"}: the text.
std::vector<int32_t> tokenize_request(const std::string& body, const RequestContext& context);
std::string detokenize_request(const std::string& body, const RequestContext& context);

// Accumulates a request's events into response JSON.
class ResponseBuilder {
 public:
  // One choice (`index`) of a response; the choices of one response share its id (empty: new).
  ResponseBuilder(const ParsedRequest& request, const Tokenizer& tokenizer, std::string model, int64_t index = 0,
                  std::string id = "");
  const std::string& id() const { return id_; }
  // SSE "data: ..." payloads for one event (empty when it carries nothing to send).
  std::vector<std::string> stream_chunks(const StreamEvent& event);
  // The trailing usage chunk (when include_usage) — call after the final event.
  std::string usage_chunk() const { return usage_chunk({this}); }
  // For non-streaming: add an event, then build the whole response.
  void add(const StreamEvent& event);
  nlohmann::json final_response() const { return final_response({this}); }
  // The same for a response of several choices: every choice's, and their usage summed (the
  // prompt counted once).
  static std::string usage_chunk(const std::vector<const ResponseBuilder*>& choices);
  static nlohmann::json final_response(const std::vector<const ResponseBuilder*>& choices);

 private:
  nlohmann::json logprobs_json(const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>& logprobs);
  nlohmann::json tool_calls_json(const std::vector<ToolCallDelta>& calls, bool streaming) const;
  void record_finish(const StreamEvent& event);
  nlohmann::json chunk_base() const;
  nlohmann::json choice() const;
  static nlohmann::json usage(const std::vector<const ResponseBuilder*>& choices);

  const ParsedRequest& request_;
  const Tokenizer& tokenizer_;
  std::string model_, id_;
  int64_t index_;
  ChatStream chat_;  // a chat choice's output, parsed
  int64_t created_;
  bool sent_role_ = false;
  ChatDelta message_;  // non-streaming: the whole output, parsed
  std::string text_, finish_reason_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0, text_offset_ = 0;
  int64_t draft_tokens_ = 0, accepted_draft_tokens_ = 0;
  nlohmann::json all_logprobs_;
};

}  // namespace mlaserve
