// The request model inside the server: what every wire protocol's request becomes (the engine
// request, how its output is read and answered) and what requests are parsed against. Each
// protocol (openai_protocol.h, anthropic_protocol.h) maps its own fields onto it.
#pragma once
#include <functional>
#include <list>
#include <mutex>
#include <stdexcept>
#include <string>

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
  std::shared_ptr<const grammar::Grammar> get(const std::string& schema,
                                              const std::function<grammar::Grammar()>& compile);

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
  ChatParsing parsing;               // what the server parses out of chat output (chat_parsing)
  GrammarCache* grammars = nullptr;  // the server's; none: every request compiles its own
};

}  // namespace mlaserve
