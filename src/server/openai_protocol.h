// OpenAI-compatible request parsing and response building for /v1/completions and
// /v1/chat/completions. Every malformed field is an ApiError naming the parameter.
#pragma once
#include <functional>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/generation_config.h"
#include "server/chat_output.h"
#include "tokenizer/chat_template.h"

namespace mlaserve {

struct ApiError : std::runtime_error {
  ApiError(int status_code, const std::string& message, std::string parameter = "")
      : std::runtime_error(message), status(status_code), param(std::move(parameter)) {}
  int status;
  std::string param;
};

// {"error": {"message", "type", "param", "code"}} in OpenAI's shape.
nlohmann::json error_body(int status, const std::string& message, const std::string& param = "");

enum class Endpoint { Completions, ChatCompletions };

struct ParsedRequest {
  Endpoint endpoint;
  EngineRequest engine;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // the response carries logprobs
  int64_t n = 1;               // independent choices (each its own engine request)
  // Chat: what is parsed out of the output (tool calls only for a request with tools and
  // tool_choice auto), the prompt's last characters (whether it left a <think> or a K3 channel
  // open), and whether calls after the first are kept.
  ChatParsing parsing;
  std::string prompt_end;
  bool parallel_tool_calls = true;
  // tool_choice named: the whole output is this function's arguments (grammar-constrained).
  std::string forced_tool;
  // tool_choice required: the output is a JSON list of {"name", "parameters"} calls.
  bool required_tool_calls = false;
};

// Compiled grammars by their schema's text, the most recently used kept: requests with the same
// schema share a grammar and so its token masks. Thread-safe.
class GrammarCache {
 public:
  std::shared_ptr<const grammar::Grammar> get(const std::string& schema, const std::function<grammar::Grammar()>& compile);

 private:
  static constexpr size_t kCapacity = 64;
  std::mutex mutex_;
  std::list<std::pair<std::string, std::shared_ptr<const grammar::Grammar>>> entries_;  // most recent first
};

// What a request is parsed against: the served model's tokenizer and chat template, its name
// (the only one accepted; empty: any), context length and vocabulary, and the checkpoint's
// recommended sampling (generation_config.json: defaults for the fields a request omits).
struct RequestContext {
  const Tokenizer& tokenizer;
  const ChatTemplate& chat_template;
  std::string served_model;
  int64_t max_model_len = 0;
  int64_t vocab_size = 0;
  GenerationConfig generation;
  ChatParsing parsing;  // what the server parses out of chat output (chat_parsing)
  GrammarCache* grammars = nullptr;  // the server's; none: every request compiles its own
};

// `body` is the raw HTTP body.
ParsedRequest parse_request(Endpoint endpoint, const std::string& body, const RequestContext& context);

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
  ChatDelta parsed(const StreamEvent& event);  // the event's text through the output parser
  ChatDelta required_calls(const StreamEvent& event);
  nlohmann::json tool_calls_json(const std::vector<ToolCallDelta>& calls, bool streaming) const;
  std::string finish_reason(const StreamEvent& event) const;
  void record_finish(const StreamEvent& event);
  nlohmann::json chunk_base() const;
  nlohmann::json choice() const;
  static nlohmann::json usage(const std::vector<const ResponseBuilder*>& choices);

  const ParsedRequest& request_;
  const Tokenizer& tokenizer_;
  std::string model_, id_;
  int64_t index_;
  int64_t created_;
  bool sent_role_ = false;
  std::optional<ChatOutputParser> parser_;
  ChatDelta message_;               // non-streaming: the whole output, parsed
  std::string required_text_;       // tool_choice required: the output so far
  std::vector<std::string> call_ids_;  // by tool call index
  std::string text_, finish_reason_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0, text_offset_ = 0;
  int64_t draft_tokens_ = 0, accepted_draft_tokens_ = 0;
  nlohmann::json all_logprobs_;
};

}  // namespace mlaserve
