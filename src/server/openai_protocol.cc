#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <chrono>
#include <random>
#include <set>

#include "base/error.h"
#include "grammar/json_schema.h"
#include "grammar/kimi_k3_grammar.h"
#include "server/chat_stream.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // what templates see keeps the request's key order
constexpr int64_t kMaxChoices = 16;

const char* error_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "service_unavailable";
    default: return "server_error";
  }
}

// Typed optional fields; a present field of the wrong type or range is an ApiError.
std::optional<double> number(const ojson& body, const char* key, double low, double high) {
  auto found = body.find(key);
  if (found == body.end() || found->is_null()) return std::nullopt;
  if (!found->is_number()) throw ApiError(400, fmt::format("'{}' must be a number", key), key);
  const double value = found->get<double>();
  if (!(value >= low && value <= high))
    throw ApiError(400, fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, found->dump()), key);
  return value;
}

std::optional<int64_t> integer(const ojson& body, const char* key, int64_t low, int64_t high) {
  auto found = body.find(key);
  if (found == body.end() || found->is_null()) return std::nullopt;
  if (!found->is_number_integer()) throw ApiError(400, fmt::format("'{}' must be an integer", key), key);
  if (found->is_number_unsigned() && found->get<uint64_t>() > uint64_t(high))
    throw ApiError(400, fmt::format("'{}' must be at most {}, got {}", key, high, found->dump()), key);
  const int64_t value = found->get<int64_t>();
  if (value < low || value > high)
    throw ApiError(400, fmt::format("'{}' must be in [{}, {}], got {}", key, low, high, value), key);
  return value;
}

bool boolean(const ojson& body, const char* key, bool fallback) {
  auto found = body.find(key);
  if (found == body.end() || found->is_null()) return fallback;
  if (!found->is_boolean()) throw ApiError(400, fmt::format("'{}' must be true or false", key), key);
  return found->get<bool>();
}

std::vector<std::string> stop_strings(const ojson& body) {
  auto found = body.find("stop");
  if (found == body.end() || found->is_null()) return {};
  std::vector<std::string> stops;
  if (found->is_string()) {
    stops.push_back(found->get<std::string>());
  } else if (found->is_array()) {
    for (const auto& item : *found) {
      if (!item.is_string()) throw ApiError(400, "'stop' must be a string or a list of strings", "stop");
      stops.push_back(item.get<std::string>());
    }
  } else {
    throw ApiError(400, "'stop' must be a string or a list of strings", "stop");
  }
  std::erase_if(stops, [](const std::string& stop) { return stop.empty(); });
  return stops;
}

// OpenAI's logit_bias: {"token id": bias in [-100, 100]}, added to the logits before sampling.
std::vector<std::pair<int32_t, float>> logit_bias(const ojson& body, int64_t vocab_size) {
  auto found = body.find("logit_bias");
  if (found == body.end() || found->is_null()) return {};
  if (!found->is_object()) throw ApiError(400, "'logit_bias' must be an object of token id -> bias", "logit_bias");
  std::vector<std::pair<int32_t, float>> biases;
  for (const auto& [key, value] : found->items()) {
    int64_t id = -1;
    const auto [end, error] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (error != std::errc() || end != key.data() + key.size() || id < 0 || id >= vocab_size)
      throw ApiError(400, fmt::format("'logit_bias' key '{}' is not a token id in [0, {})", key, vocab_size),
                     "logit_bias");
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
      throw ApiError(400, fmt::format("'logit_bias' of token {} must be a number in [-100, 100]", key), "logit_bias");
    biases.emplace_back(int32_t(id), value.get<float>());
  }
  return biases;
}

std::vector<int32_t> token_list(const ojson& value, const char* param, int64_t vocab_hint) {
  std::vector<int32_t> ids;
  for (const auto& item : value) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() >= vocab_hint)
      throw ApiError(400, fmt::format("'{}' must hold token ids in [0, {})", param, vocab_hint), param);
    ids.push_back(item.get<int32_t>());
  }
  return ids;
}

// OpenAI's message roles, each an object; images and audio are refused by name: the text
// model is served without its vision tower.
void check_messages(const ojson& messages) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool", "function"};
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      throw ApiError(400, fmt::format("messages[{}] needs a string 'role'", i), "messages");
    if (!kRoles.contains(message["role"].get<std::string>()))
      throw ApiError(400,
                     fmt::format("messages[{}].role '{}' is not one of system, developer, user, assistant, tool", i,
                                 message["role"].get<std::string>()),
                     "messages");
    if (!message.contains("content") || !message["content"].is_array()) continue;
    for (const auto& part : message["content"]) {
      const std::string type = part.is_object() ? part.value("type", "") : "";
      if (type == "image_url" || type == "image" || type == "input_image")
        throw ApiError(400, "images are not supported: this model's text model is served without its vision tower",
                       "messages");
      if (type == "input_audio") throw ApiError(400, "audio is not supported: this is a text model", "messages");
    }
  }
}

// OpenAI's tools: [{"type": "function", "function": {"name", "description", "parameters"}}].
ojson tool_definitions(const ojson& body) {
  auto found = body.find("tools");
  if (found == body.end() || found->is_null()) return ojson();
  if (!found->is_array()) throw ApiError(400, "'tools' must be a list", "tools");
  for (size_t i = 0; i < found->size(); ++i) {
    const ojson& tool = (*found)[i];
    const bool valid = tool.is_object() && tool.value("type", "") == "function" && tool.contains("function") &&
                       tool["function"].is_object() && tool["function"].contains("name") &&
                       tool["function"]["name"].is_string();
    if (!valid)
      throw ApiError(400,
                     fmt::format("tools[{}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}", i),
                     "tools");
  }
  return *found;
}

// tool_choice: "none", "auto" (the default when there are tools), "required", or
// {"type": "function", "function": {"name"}} naming one of the tools.
std::string tool_choice(const ojson& body, const ojson& tools) {
  const bool has_tools = tools.is_array() && !tools.empty();
  auto found = body.find("tool_choice");
  if (found == body.end() || found->is_null()) return has_tools ? "auto" : "none";
  if (found->is_string()) {
    const std::string choice = found->get<std::string>();
    if (choice != "none" && choice != "auto" && choice != "required")
      throw ApiError(400,
                     fmt::format("'tool_choice' must be none, auto, required or a named function, got '{}'", choice),
                     "tool_choice");
    if (choice != "none" && !has_tools)
      throw ApiError(400, fmt::format("'tool_choice' {} needs 'tools'", choice), "tool_choice");
    return choice;
  }
  const bool named = found->is_object() && found->value("type", "") == "function" && found->contains("function") &&
                     (*found)["function"].is_object() && (*found)["function"].contains("name") &&
                     (*found)["function"]["name"].is_string();
  if (!named)
    throw ApiError(400,
                   "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\"}}",
                   "tool_choice");
  const std::string name = (*found)["function"]["name"].get<std::string>();
  const bool known = has_tools && std::any_of(tools.begin(), tools.end(),
                                              [&](const ojson& tool) { return tool["function"]["name"] == name; });
  if (!known)
    throw ApiError(400, fmt::format("'tool_choice' names '{}', which is not one of the request's tools", name),
                   "tool_choice");
  return "function:" + name;
}

// The conversation as the chat template receives it: the request's messages, tools, documents
// and chat_template_kwargs, and what it asks of the output (for formats that state it).
ChatInput chat_input(const ojson& body, const ojson& tools) {
  auto found = body.find("messages");
  if (found == body.end() || !found->is_array() || found->empty())
    throw ApiError(400, "'messages' must be a non-empty list", "messages");
  check_messages(*found);
  ChatInput input;
  input.messages = *found;
  input.tools = tools;
  input.add_generation_prompt = boolean(body, "add_generation_prompt", true);
  input.continue_final_message = boolean(body, "continue_final_message", false);
  if (body.contains("documents") && !body["documents"].is_null()) {
    if (!body["documents"].is_array()) throw ApiError(400, "'documents' must be a list", "documents");
    input.documents = body["documents"];
  }
  if (body.contains("chat_template_kwargs") && !body["chat_template_kwargs"].is_null()) {
    if (!body["chat_template_kwargs"].is_object())
      throw ApiError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs");
    input.kwargs = body["chat_template_kwargs"];
  }
  input.tool_choice = body.value("tool_choice", ojson());
  input.response_format = body.value("response_format", ojson());
  if (body.contains("reasoning_effort") && !body["reasoning_effort"].is_null()) {
    if (!body["reasoning_effort"].is_string())
      throw ApiError(400, "'reasoning_effort' must be a string", "reasoning_effort");
    input.reasoning_effort = body["reasoning_effort"].get<std::string>();
  }
  return input;
}

// The conversation rendered by the checkpoint's chat template, as segments to encode.
std::vector<PromptSegment> rendered_chat(const ChatInput& input, const RequestContext& context) {
  try {
    return context.chat_template.render_segments(input);
  } catch (const ChatInputError& e) {
    throw ApiError(400, e.what(), e.field);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("the chat template cannot render these messages: {}", e.what()), "messages");
  }
}

// A grammar from the server's cache when another request used the same one (`key`): their
// token masks are then shared too.
std::shared_ptr<const grammar::Grammar> compiled(const RequestContext& context, const std::string& key,
                                                 const std::function<grammar::Grammar()>& compile, const char* param) {
  try {
    if (!context.grammars) return std::make_shared<const grammar::Grammar>(compile());
    return context.grammars->get(key, compile);
  } catch (const Error& e) {
    throw ApiError(400, fmt::format("'{}': {}", param, e.what()), param);
  }
}

// The grammar of a JSON schema (null: any JSON object), after free reasoning with `thinking`.
std::shared_ptr<const grammar::Grammar> compiled(const RequestContext& context, const ojson& schema, const char* param,
                                                 const std::optional<grammar::ThinkingFirst>& thinking = std::nullopt) {
  const std::string key =
      (thinking ? thinking->opened_in_prompt ? "thinking opened " : "thinking " : "") + schema.dump();
  return compiled(
      context, key,
      [&] {
        return schema.is_null() ? grammar::json_object_grammar(thinking)
                                : grammar::json_schema_grammar(schema, thinking);
      },
      param);
}

// What response_format asks: nothing (absent, text), any JSON object (null: json_object), or a
// value valid under json_schema's schema.
std::optional<ojson> response_format_schema(const ojson& body) {
  auto found = body.find("response_format");
  if (found == body.end() || found->is_null()) return std::nullopt;
  const std::string type = found->is_object() ? found->value("type", "") : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") return ojson();
  if (type != "json_schema")
    throw ApiError(400,
                   "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                   "\"json_schema\", \"json_schema\": {\"name\", \"schema\"}}",
                   "response_format");
  const ojson& spec = found->contains("json_schema") ? (*found)["json_schema"] : ojson();
  if (!spec.is_object() || !spec.contains("schema"))
    throw ApiError(400, "'response_format' json_schema needs 'json_schema': {\"name\", \"schema\"}", "response_format");
  return spec["schema"];
}

// response_format (json_object, or json_schema with its schema), or vLLM's guided_json (a
// schema) and guided_choice (exactly one of the strings), after free reasoning with `thinking`.
std::shared_ptr<const grammar::Grammar> output_grammar(
    const ojson& body, const RequestContext& context,
    const std::optional<grammar::ThinkingFirst>& thinking = std::nullopt) {
  if (body.contains("guided_json") && !body["guided_json"].is_null())
    return compiled(context, body["guided_json"], "guided_json", thinking);
  if (body.contains("guided_choice") && !body["guided_choice"].is_null()) {
    const ojson& choices = body["guided_choice"];
    if (!choices.is_array() || choices.empty() ||
        !std::all_of(choices.begin(), choices.end(), [](const ojson& c) { return c.is_string(); }))
      throw ApiError(400, "'guided_choice' must be a non-empty list of strings", "guided_choice");
    const std::string key =
        (thinking ? thinking->opened_in_prompt ? "thinking opened " : "thinking " : "") + choices.dump();
    return compiled(
        context, "guided_choice " + key,
        [&] { return grammar::choice_grammar(choices.get<std::vector<std::string>>(), thinking); }, "guided_choice");
  }
  const std::optional<ojson> schema = response_format_schema(body);
  return schema ? compiled(context, *schema, "response_format", thinking) : nullptr;
}

// tool_choice required: a JSON list of calls, each one of the tools with its parameters (the
// shape vLLM asks for), at most one without parallel_tool_calls.
ojson required_calls_schema(const ojson& tools, bool parallel) {
  ojson calls = ojson::array();
  for (const auto& tool : tools)
    calls.push_back({{"type", "object"},
                     {"properties",
                      {{"name", {{"const", tool["function"]["name"]}}},
                       {"parameters", tool["function"].value("parameters", ojson({{"type", "object"}}))}}},
                     {"required", {"name", "parameters"}}});
  ojson schema = {{"type", "array"}, {"items", {{"anyOf", calls}}}, {"minItems", 1}};
  if (!parallel) schema["maxItems"] = 1;
  return schema;
}

// tool_choice named: the output is that function's arguments, valid under its parameters.
ojson named_call_schema(const ojson& tools, const std::string& name) {
  for (const auto& tool : tools)
    if (tool["function"]["name"] == name) return tool["function"].value("parameters", ojson({{"type", "object"}}));
  return ojson({{"type", "object"}});
}

// What a template's chat output holds: constrained JSON (response_format, a required or named
// tool call) or reasoning and tool calls in the template's markup.
void parse_chat_output(const ojson& body, const ojson& tools, const std::string& choice, ParsedRequest& request,
                       const RequestContext& context) {
  // A thinking template reasons first, freely; the document's grammar starts where it ends.
  std::optional<grammar::ThinkingFirst> thinking;
  if (context.parsing.reasoning) thinking = grammar::ThinkingFirst{think_opened_in_prompt(request.prompt_end)};
  request.engine.sampling.grammar = output_grammar(body, context, thinking);
  request.parsing.reasoning = context.parsing.reasoning;
  if (choice == "required") {
    request.required_tool_calls = true;
    request.engine.sampling.grammar =
        compiled(context, required_calls_schema(tools, request.parallel_tool_calls), "tools");
  } else if (choice.starts_with("function:")) {
    request.forced_tool = choice.substr(9);
    request.engine.sampling.grammar = compiled(context, named_call_schema(tools, request.forced_tool), "tools");
  }
  // A forced call's output is its JSON from the first token: there is no reasoning to split off.
  if (choice == "required" || choice.starts_with("function:")) request.parsing.reasoning = false;
  if (choice == "auto") {
    if (!context.parsing.tools)
      throw ApiError(400,
                     "'tools' cannot be used: the chat template writes no tool calls this server can parse "
                     "(serve with --tool-parser and a --chat-template that renders tools)",
                     "tools");
    request.parsing.tools = context.parsing.tools;
  }
}

// K3 writes its reasoning, answer and calls in channels, whatever the request: the output is
// read as XTML, with calls when the request offers tools; response_format and a required or
// named tool_choice decode under a grammar that writes XTML.
void parse_kimi_k3_chat(const ojson& body, const ojson& tools, const std::string& choice, KimiK3Opened opened,
                        ParsedRequest& request, const RequestContext& context) {
  request.parsing = context.parsing;
  request.parsing.tools.reset();
  if (context.parsing.tools && tools.is_array() && !tools.empty() && choice != "none")
    request.parsing.tools = ToolCallFormat::KimiK3;
  for (const char* key : {"guided_json", "guided_choice"})
    if (body.contains(key) && !body[key].is_null())
      throw ApiError(400, fmt::format("'{}' is not supported with Kimi K3's format (use response_format)", key), key);
  grammar::KimiK3Constraint constraint{opened, response_format_schema(body)};
  if (choice == "required") {
    constraint.tools = tools;
    constraint.one_call = !request.parallel_tool_calls;
  } else if (choice.starts_with("function:")) {
    for (const auto& tool : tools)
      if (tool["function"]["name"] == choice.substr(9)) constraint.tools.push_back(tool);
    constraint.one_call = constraint.named = true;
  }
  if (!constraint.response_schema && constraint.tools.empty()) return;
  const std::string key = ojson({{"kimi_k3", int(opened)},
                                 {"schema", constraint.response_schema.value_or("none")},
                                 {"tools", constraint.tools},
                                 {"one_call", constraint.one_call},
                                 {"named", constraint.named}})
                              .dump();
  request.engine.sampling.grammar = compiled(
      context, key, [&] { return grammar::kimi_k3_grammar(constraint); },
      constraint.tools.empty() ? "response_format" : "tools");
}

// A chat request's prompt and what is parsed out of its output. Output parsing needs the
// markup, so its text keeps special tokens.
void parse_chat(const ojson& body, const RequestContext& context, ParsedRequest& request) {
  const ojson tools = tool_definitions(body);
  const std::string choice = tool_choice(body, tools);
  request.parallel_tool_calls = boolean(body, "parallel_tool_calls", true);
  const std::vector<PromptSegment> prompt = rendered_chat(chat_input(body, tools), context);
  for (auto segment = prompt.rbegin(); segment != prompt.rend() && request.prompt_end.size() < 64; ++segment)
    request.prompt_end.insert(0, segment->text);
  if (context.parsing.kimi_k3)
    parse_kimi_k3_chat(body, tools, choice, kimi_k3_opened(request.prompt_end), request, context);
  else
    parse_chat_output(body, tools, choice, request, context);
  request.engine.prompt = encode_segments(prompt, context.tokenizer);
  const bool parses = request.parsing.reasoning || request.parsing.tools || request.parsing.kimi_k3;
  request.engine.skip_special_tokens = boolean(body, "skip_special_tokens", true) && !parses;
}

std::vector<int32_t> completion_prompt(const ojson& body, const Tokenizer& tokenizer, int64_t vocab_hint) {
  auto found = body.find("prompt");
  if (found == body.end()) throw ApiError(400, "'prompt' is required", "prompt");
  ojson prompt = *found;
  if (prompt.is_array() && prompt.size() == 1 && (prompt[0].is_string() || prompt[0].is_array())) prompt = prompt[0];
  if (prompt.is_string()) return tokenizer.encode_prompt(prompt.get<std::string>());
  if (prompt.is_array() && std::all_of(prompt.begin(), prompt.end(), [](const ojson& v) { return v.is_number(); }))
    return token_list(prompt, "prompt", vocab_hint);
  throw ApiError(400, "'prompt' must be a string or a list of token ids (one prompt per request)", "prompt");
}

// Fields of OpenAI's API (and vLLM's guided-decoding extras) that would change what is generated
// and that this server does not implement: refused by name rather than silently ignored. Their
// neutral values pass (an empty tools list, response_format "text", best_of 1, an empty
// suffix). Other unknown fields are ignored, as vLLM does.
void refuse_unsupported(const ojson& body) {
  auto present = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  auto refuse = [](const char* key, const std::string& why) {
    throw ApiError(400, fmt::format("'{}' is not supported: {}", key, why), key);
  };
  if (present("functions") && !body["functions"].empty()) refuse("functions", "use 'tools' (functions is deprecated)");
  for (const char* key : {"guided_regex", "guided_grammar"})
    if (present(key))
      refuse(key, "constrained decoding takes JSON schemas (response_format, guided_json, guided_choice)");
  if (present("chat_template"))
    refuse("chat_template", "the server renders the checkpoint's template (or serve --chat-template)");
  if (present("best_of") && body["best_of"] != 1) refuse("best_of", "one sequence a request");
  if (present("suffix") && body["suffix"] != "") refuse("suffix", "no insertion");
}

// Nesting deeper than this is refused: the JSON values, the chat template's values and the
// schema compiler recurse over it, and a body of a million brackets would overflow the stack.
constexpr int kMaxBodyDepth = 64;

ojson request_object(const std::string& raw) {
  ojson body;
  try {
    body = ojson::parse(raw, [](int depth, ojson::parse_event_t, ojson&) {
      if (depth > kMaxBodyDepth)
        throw ApiError(400, fmt::format("the request body nests deeper than {} levels", int(kMaxBodyDepth)));
      return true;
    });
  } catch (const ojson::exception& e) {
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return body;
}

}  // namespace

std::shared_ptr<const grammar::Grammar> GrammarCache::get(const std::string& schema,
                                                          const std::function<grammar::Grammar()>& compile) {
  std::lock_guard lock(mutex_);
  auto found = std::find_if(entries_.begin(), entries_.end(), [&](const auto& entry) { return entry.first == schema; });
  if (found != entries_.end()) {
    entries_.splice(entries_.begin(), entries_, found);
    return entries_.front().second;
  }
  entries_.emplace_front(schema, std::make_shared<const grammar::Grammar>(compile()));
  if (entries_.size() > kCapacity) entries_.pop_back();
  return entries_.front().second;
}

json error_body(int status, const std::string& message, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", error_type(status)},
            {"param", param.empty() ? json() : json(param)},
            {"code", status}}}};
}

namespace {

ParsedRequest parse_request_body(Endpoint endpoint, const ojson& body, const RequestContext& context) {
  const Tokenizer& tokenizer = context.tokenizer;
  const int64_t max_model_len = context.max_model_len;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) throw ApiError(400, "'model' must be a string", "model");
    const std::string model = body["model"].get<std::string>();
    if (!context.served_model.empty() && model != context.served_model)
      throw ApiError(400,
                     fmt::format("The model '{}' does not exist; this server serves '{}'", model, context.served_model),
                     "model");
  }
  refuse_unsupported(body);
  ParsedRequest request;
  request.endpoint = endpoint;
  const int64_t vocab_hint = std::numeric_limits<int32_t>::max();
  EngineRequest& engine = request.engine;
  if (endpoint == Endpoint::ChatCompletions) {
    parse_chat(body, context, request);
  } else {
    engine.prompt = completion_prompt(body, tokenizer, vocab_hint);
    engine.skip_special_tokens = boolean(body, "skip_special_tokens", true);
    engine.sampling.grammar = output_grammar(body, context);
  }
  const int64_t prompt_length = int64_t(engine.prompt.size());
  if (prompt_length >= max_model_len)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens.",
                               max_model_len, prompt_length),
                   endpoint == Endpoint::ChatCompletions ? "messages" : "prompt");
  auto max_tokens = integer(body, "max_completion_tokens", 1, max_model_len);
  if (!max_tokens) max_tokens = integer(body, "max_tokens", 1, max_model_len);
  engine.max_tokens = max_tokens.value_or(max_model_len - prompt_length);
  request.n = integer(body, "n", 1, kMaxChoices).value_or(1);
  if (boolean(body, "echo", false)) throw ApiError(400, "'echo' is not supported", "echo");
  SamplingOptions& sampling = engine.sampling;
  const GenerationConfig& defaults = context.generation;
  sampling.params.temperature =
      float(number(body, "temperature", 0.0, 100.0).value_or(defaults.temperature.value_or(1.0)));
  sampling.params.top_p = float(number(body, "top_p", 1e-9, 1.0).value_or(defaults.top_p.value_or(1.0)));
  const int64_t top_k =
      integer(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(defaults.top_k.value_or(0));
  sampling.params.top_k = top_k < 0 ? 0 : top_k;
  sampling.params.min_p = float(number(body, "min_p", 0.0, 1.0).value_or(defaults.min_p.value_or(0.0)));
  sampling.presence_penalty = float(number(body, "presence_penalty", -2.0, 2.0).value_or(0.0));
  sampling.frequency_penalty = float(number(body, "frequency_penalty", -2.0, 2.0).value_or(0.0));
  sampling.repetition_penalty =
      float(number(body, "repetition_penalty", 1e-3, 100.0).value_or(defaults.repetition_penalty.value_or(1.0)));
  sampling.logit_bias = logit_bias(body, context.vocab_size);
  if (auto seed = integer(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    sampling.seed = uint64_t(*seed);
  if (endpoint == Endpoint::ChatCompletions) {
    if (boolean(body, "logprobs", false)) sampling.logprobs = integer(body, "top_logprobs", 0, 20).value_or(0);
  } else if (auto logprobs = integer(body, "logprobs", 0, 20)) {
    sampling.logprobs = *logprobs;
  }
  request.logprobs = sampling.logprobs >= 0;
  engine.stop = stop_strings(body);
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null()) {
    if (!body["stop_token_ids"].is_array())
      throw ApiError(400, "'stop_token_ids' must be a list of token ids", "stop_token_ids");
    engine.stop_token_ids = token_list(body["stop_token_ids"], "stop_token_ids", vocab_hint);
  }
  engine.ignore_eos = boolean(body, "ignore_eos", false);
  request.stream = boolean(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    if (!body["stream_options"].is_object())
      throw ApiError(400, "'stream_options' must be an object", "stream_options");
    request.include_usage = boolean(body["stream_options"], "include_usage", false);
  }
  return request;
}

// Runs a parse of a request body; a JSON type error no check caught is the request's fault: 400.
template <class Parse>
auto json_errors_refused(Parse parse) {
  try {
    return parse();
  } catch (const ojson::exception& e) {
    throw ApiError(400, fmt::format("malformed request: {}", e.what()));
  }
}

}  // namespace

ojson request_body(const std::string& raw) { return request_object(raw); }

ParsedRequest parse_chat_request(const ojson& body, const RequestContext& context) {
  return json_errors_refused([&] { return parse_request_body(Endpoint::ChatCompletions, body, context); });
}

ParsedRequest parse_request(Endpoint endpoint, const std::string& raw, const RequestContext& context) {
  return json_errors_refused([&] { return parse_request_body(endpoint, request_object(raw), context); });
}

std::vector<int32_t> tokenize_request(const std::string& raw, const RequestContext& context) {
  return json_errors_refused([&] {
    const ojson body = request_object(raw);
    if (body.contains("messages"))
      return encode_segments(rendered_chat(chat_input(body, tool_definitions(body)), context), context.tokenizer);
    if (!body.contains("prompt") || !body["prompt"].is_string())
      throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt");
    const std::string text = body["prompt"].get<std::string>();
    return boolean(body, "add_special_tokens", true) ? context.tokenizer.encode_prompt(text)
                                                     : context.tokenizer.encode(text);
  });
}

std::string detokenize_request(const std::string& raw, const RequestContext& context) {
  return json_errors_refused([&] {
    const ojson body = request_object(raw);
    if (!body.contains("tokens") || !body["tokens"].is_array())
      throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens");
    return context.tokenizer.decode(token_list(body["tokens"], "tokens", context.vocab_size), false);
  });
}

ResponseBuilder::ResponseBuilder(const ParsedRequest& request, const Tokenizer& tokenizer, std::string model,
                                 int64_t index, std::string id)
    : request_(request),
      tokenizer_(tokenizer),
      model_(std::move(model)),
      id_(id.empty() ? random_id(request.endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-")
                     : std::move(id)),
      index_(index),
      chat_(request),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
  all_logprobs_ = request.endpoint == Endpoint::ChatCompletions ? json{{"content", json::array()}}
                                                                : json{{"tokens", json::array()},
                                                                       {"token_logprobs", json::array()},
                                                                       {"top_logprobs", json::array()},
                                                                       {"text_offset", json::array()}};
}

json ResponseBuilder::chunk_base() const {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  return {{"id", id_},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_}};
}

// Speculative decoding's drafts, where the request had any, in OpenAI's fields for predicted
// outputs (completion_tokens_details): drafted tokens the model accepted and those it rejected.
json ResponseBuilder::usage(const std::vector<const ResponseBuilder*>& choices) {
  int64_t completion_tokens = 0, drafted = 0, accepted = 0;
  for (const ResponseBuilder* choice : choices) {
    completion_tokens += choice->completion_tokens_;
    drafted += choice->draft_tokens_;
    accepted += choice->accepted_draft_tokens_;
  }
  const int64_t prompt_tokens = choices[0]->prompt_tokens_;
  json usage = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", choices[0]->cached_tokens_}}}};
  if (drafted > 0)
    usage["completion_tokens_details"] = {{"accepted_prediction_tokens", accepted},
                                          {"rejected_prediction_tokens", drafted - accepted}};
  return usage;
}

json ResponseBuilder::logprobs_json(const std::vector<int32_t>& ids, const std::vector<TokenLogprobs>& logprobs) {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  auto token_text = [&](int32_t id) { return tokenizer_.decode(std::span(&id, 1), false); };
  auto bytes_of = [](const std::string& text) { return std::vector<int>(text.begin(), text.end()); };
  json out = chat ? json{{"content", json::array()}}
                  : json{{"tokens", json::array()},
                         {"token_logprobs", json::array()},
                         {"top_logprobs", json::array()},
                         {"text_offset", json::array()}};
  for (size_t i = 0; i < ids.size() && i < logprobs.size(); ++i) {
    const std::string text = token_text(ids[i]);
    if (chat) {
      json top = json::array();
      for (const auto& [id, lp] : logprobs[i].top)
        top.push_back({{"token", token_text(id)}, {"logprob", lp}, {"bytes", bytes_of(token_text(id))}});
      out["content"].push_back(
          {{"token", text}, {"logprob", logprobs[i].logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
    } else {
      json top = json::object();
      for (const auto& [id, lp] : logprobs[i].top) top[token_text(id)] = lp;
      out["tokens"].push_back(text);
      out["token_logprobs"].push_back(logprobs[i].logprob);
      out["top_logprobs"].push_back(top);
      out["text_offset"].push_back(text_offset_);
      text_offset_ += int64_t(text.size());
    }
  }
  return out;
}

// OpenAI's tool_calls: streamed, a call's first step has id, type and name and the rest only
// argument pieces; whole, each call complete.
json ResponseBuilder::tool_calls_json(const std::vector<ToolCallDelta>& calls, bool streaming) const {
  json out = json::array();
  for (const auto& call : calls) {
    json function = {{"arguments", call.arguments}};
    json item = {{"index", call.index}, {"function", function}};
    if (!streaming || !call.name.empty()) {
      item["id"] = chat_.call_id(call.index);
      item["type"] = "function";
      item["function"]["name"] = call.name;
    }
    if (!streaming) item.erase("index");
    out.push_back(item);
  }
  return out;
}

// The final event's counts and reason.
void ResponseBuilder::record_finish(const StreamEvent& event) {
  prompt_tokens_ = event.prompt_tokens;
  completion_tokens_ = event.completion_tokens;
  cached_tokens_ = event.cached_tokens;
  draft_tokens_ = event.draft_tokens;
  accepted_draft_tokens_ = event.accepted_draft_tokens;
  finish_reason_ = request_.endpoint == Endpoint::ChatCompletions ? chat_.finish_reason() : event.finish_reason;
}

std::vector<std::string> ResponseBuilder::stream_chunks(const StreamEvent& event) {
  const bool chat = request_.endpoint == Endpoint::ChatCompletions;
  std::vector<std::string> chunks;
  auto dump = [](const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); };
  if (chat && !sent_role_) {
    json first = chunk_base();
    first["choices"] = {{{"index", index_},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}}};
    chunks.push_back(dump(first));
    sent_role_ = true;
  }
  const ChatDelta delta = chat ? chat_.next(event) : ChatDelta{};
  if (event.finished) record_finish(event);
  const bool nothing = chat ? delta.empty() : event.text.empty();
  if (nothing && !event.finished && !request_.logprobs) return chunks;
  json choice = {{"index", index_}, {"finish_reason", event.finished ? json(finish_reason_) : json()}};
  choice["logprobs"] =
      request_.logprobs && !event.token_ids.empty() ? logprobs_json(event.token_ids, event.logprobs) : json();
  if (chat) {
    json& out = choice["delta"] = json::object();
    if (!delta.reasoning.empty()) out["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty() || (nothing && !event.finished)) out["content"] = delta.content;
    if (!delta.tool_calls.empty()) out["tool_calls"] = tool_calls_json(delta.tool_calls, true);
  } else {
    choice["text"] = event.text;
  }
  json chunk = chunk_base();
  chunk["choices"] = json::array({choice});
  if (request_.include_usage) chunk["usage"] = nullptr;
  chunks.push_back(dump(chunk));
  return chunks;
}

std::string ResponseBuilder::usage_chunk(const std::vector<const ResponseBuilder*>& choices) {
  json chunk = choices[0]->chunk_base();
  chunk["choices"] = json::array();
  chunk["usage"] = usage(choices);
  return chunk.dump(-1, ' ', false, json::error_handler_t::replace);
}

void ResponseBuilder::add(const StreamEvent& event) {
  if (request_.logprobs && !event.token_ids.empty()) {
    json piece = logprobs_json(event.token_ids, event.logprobs);
    for (auto& [key, values] : piece.items())
      for (auto& value : values) all_logprobs_[key].push_back(value);
  }
  if (request_.endpoint == Endpoint::ChatCompletions)
    message_.append(chat_.next(event));
  else
    text_ += event.text;
  if (event.finished) record_finish(event);
}

json ResponseBuilder::choice() const {
  json choice = {
      {"index", index_}, {"finish_reason", finish_reason_}, {"logprobs", request_.logprobs ? all_logprobs_ : json()}};
  if (request_.endpoint != Endpoint::ChatCompletions) {
    choice["text"] = text_;
    return choice;
  }
  const bool calls = !message_.tool_calls.empty();
  json message = {{"role", "assistant"},
                  {"content", calls && message_.content.empty() ? json() : json(message_.content)}};
  if (request_.parsing.reasoning)
    message["reasoning_content"] = message_.reasoning.empty() ? json() : json(message_.reasoning);
  if (calls) message["tool_calls"] = tool_calls_json(message_.tool_calls, false);
  choice["message"] = message;
  return choice;
}

json ResponseBuilder::final_response(const std::vector<const ResponseBuilder*>& choices) {
  const ResponseBuilder& first = *choices[0];
  json list = json::array();
  for (const ResponseBuilder* choice : choices) list.push_back(choice->choice());
  const bool chat = first.request_.endpoint == Endpoint::ChatCompletions;
  return {{"id", first.id_},           {"object", chat ? "chat.completion" : "text_completion"},
          {"created", first.created_}, {"model", first.model_},
          {"choices", list},           {"usage", usage(choices)}};
}

}  // namespace mlaserve
