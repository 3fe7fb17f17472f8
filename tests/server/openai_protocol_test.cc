// The OpenAI request parser and response builder on their own: defaults from the checkpoint's
// generation_config.json unless the request sets a field, every malformed field an ApiError
// naming it, and responses whose text, finish reason and usage are the events'.
#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace mlaserve {
namespace {

class OpenAiProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_model(dir_.path(), testing::micro_config(), StorageDType::BF16, 1);
    tokenizer_ = Tokenizer::load(dir_.path());
    chat_template_ = std::make_unique<ChatTemplate>(ChatTemplate::load(dir_.path(), *tokenizer_));
    generation_.temperature = 0.6;
    generation_.top_p = 0.95;
  }
  ParsedRequest parse(Endpoint endpoint, const std::string& body) const {
    const RequestContext context{*tokenizer_, *chat_template_, "micro", max_model_len_, 512, generation_, parsing_};
    return parse_request(endpoint, body, context);
  }
  // The parameter an invalid body is refused for (and that it is refused with 400).
  std::string refused_param(Endpoint endpoint, const std::string& body) const {
    try {
      parse(endpoint, body);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      return e.param;
    }
    ADD_FAILURE() << "accepted: " << body;
    return "";
  }
  testing::TempDir dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  GenerationConfig generation_;
  ChatParsing parsing_;  // what the server parses out of chat output
  int64_t max_model_len_ = 64;
};

TEST_F(OpenAiProtocol, OmittedFieldsTakeTheCheckpointsDefaults) {
  const ParsedRequest plain = parse(Endpoint::Completions, R"({"prompt": [5, 6, 7]})");
  EXPECT_EQ(plain.engine.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(plain.engine.max_tokens, 64 - 3);  // the rest of the context
  EXPECT_FLOAT_EQ(plain.engine.sampling.params.temperature, 0.6f);
  EXPECT_FLOAT_EQ(plain.engine.sampling.params.top_p, 0.95f);
  EXPECT_FALSE(plain.engine.sampling.seed.has_value());
  const ParsedRequest set = parse(Endpoint::Completions, R"({"prompt": [5], "temperature": 0, "top_p": 0.5,
      "max_tokens": 9, "seed": 4, "logit_bias": {"7": -100}, "stop": "x", "logprobs": 2, "stream": true,
      "stream_options": {"include_usage": true}})");
  EXPECT_FLOAT_EQ(set.engine.sampling.params.temperature, 0.0f);
  EXPECT_FLOAT_EQ(set.engine.sampling.params.top_p, 0.5f);
  EXPECT_EQ(set.engine.max_tokens, 9);
  EXPECT_EQ(set.engine.sampling.seed, 4u);
  EXPECT_EQ(set.engine.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}}));
  EXPECT_EQ(set.engine.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(set.engine.sampling.logprobs, 2);
  EXPECT_TRUE(set.stream && set.include_usage && set.logprobs);
}

TEST_F(OpenAiProtocol, ChatMessagesGoThroughTheChatTemplate) {
  const ParsedRequest chat =
      parse(Endpoint::ChatCompletions,
            R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 3})");
  ChatInput input;
  input.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(chat.engine.prompt, tokenizer_->encode(chat_template_->render(input)));
  EXPECT_EQ(chat.engine.sampling.logprobs, 3);
}

TEST_F(OpenAiProtocol, EveryMalformedFieldIsNamed) {
  EXPECT_EQ(refused_param(Endpoint::Completions, "{not json"), "");
  EXPECT_EQ(refused_param(Endpoint::Completions, "[1]"), "");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "model": "other"})"), "model");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({})"), "prompt");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "temperature": 101})"), "temperature");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "top_p": "high"})"), "top_p");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "max_tokens": 0})"), "max_tokens");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "logit_bias": {"512": 1}})"), "logit_bias");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "logit_bias": {"3": 101}})"), "logit_bias");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "n": 17})"), "n");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "stop": [1]})"), "stop");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [-1]})"), "prompt");
  std::string long_prompt = R"({"prompt": [1)";
  for (int i = 0; i < 64; ++i) long_prompt += ", 1";
  EXPECT_EQ(refused_param(Endpoint::Completions, long_prompt + "]}"), "prompt");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, R"({"messages": []})"), "messages");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, R"({"messages": [{"content": "hi"}]})"), "messages");
  const std::string hi = R"({"messages": [{"role": "user", "content": "hi"}], )";
  const std::string tool = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("tools": [{"type": "function"}]})"), "tools");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + tool + "}"), "tools");  // no tool-call parser
  parsing_.tools = ToolCallFormat::KimiK2;
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + tool + R"(, "tool_choice": "any"})"), "tool_choice");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("tool_choice": "required"})"), "tool_choice");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions,
                          hi + tool + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})"),
            "tool_choice");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("chat_template_kwargs": 3})"), "chat_template_kwargs");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("chat_template": "{{ x }}"})"), "chat_template");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("continue_final_message": true})"), "messages");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions,
                          R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})"),
            "messages");
}

StreamEvent event(const std::string& text, std::vector<int32_t> ids, bool finished = false) {
  StreamEvent e;
  e.text = text;
  e.token_ids = std::move(ids);
  e.finished = finished;
  if (finished) {
    e.finish_reason = "length";
    e.prompt_tokens = 3;
    e.completion_tokens = 2;
  }
  return e;
}

// A body nested deeper than 64 levels is refused before anything recurses over it (a schema or
// tool parameters of 100,000 brackets overflowed the stack of the schema compiler).
TEST_F(OpenAiProtocol, DeeplyNestedBodiesAreRefused) {
  const auto nested = [](int depth) {
    std::string body =
        R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": )";
    for (int i = 0; i < depth; ++i) body += "{\"type\": \"array\", \"items\": ";
    body += "{\"type\": \"integer\"}";
    return body.append(size_t(depth), '}') + "}}}";
  };
  EXPECT_NO_THROW(parse(Endpoint::Completions, nested(20)));
  try {
    parse(Endpoint::Completions, nested(100000));
    ADD_FAILURE() << "a body 100,000 levels deep was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_NE(std::string(e.what()).find("deeper than 64"), std::string::npos) << e.what();
  }
}

// A field whose type no check expected is still the request's fault: 400, never a 500.
TEST_F(OpenAiProtocol, FieldsOfUnexpectedTypesAreRefused) {
  try {
    parse(Endpoint::ChatCompletions, R"({"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": true}})");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
  }
}

TEST_F(OpenAiProtocol, ResponsesCarryTheEventsTextReasonAndUsage) {
  const ParsedRequest chat = parse(Endpoint::ChatCompletions,
                                   R"({"messages": [{"role": "user", "content": "hi"}], "stream": true,
                                       "stream_options": {"include_usage": true}})");
  ResponseBuilder stream(chat, *tokenizer_, "micro");
  std::vector<nlohmann::json> chunks;
  for (const StreamEvent& e : {event("Hel", {5}), event("lo", {6}, true)})
    for (const std::string& chunk : stream.stream_chunks(e)) chunks.push_back(nlohmann::json::parse(chunk));
  ASSERT_EQ(chunks.size(), 3u);  // the role, then one chunk per event
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunks[1]["choices"][0]["delta"]["content"], "Hel");
  EXPECT_EQ(chunks[2]["choices"][0]["finish_reason"], "length");
  const nlohmann::json usage = nlohmann::json::parse(stream.usage_chunk())["usage"];
  EXPECT_EQ(usage["prompt_tokens"], 3);
  EXPECT_EQ(usage["total_tokens"], 5);

  const ParsedRequest completion = parse(Endpoint::Completions, R"({"prompt": [5, 6, 7]})");
  ResponseBuilder whole(completion, *tokenizer_, "micro");
  whole.add(event("Hel", {5}));
  whole.add(event("lo", {6}, true));
  const nlohmann::json response = whole.final_response();
  EXPECT_EQ(response["object"], "text_completion");
  EXPECT_EQ(response["choices"][0]["text"], "Hello");
  EXPECT_EQ(response["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(response["usage"]["completion_tokens"], 2);
}

// tool_choice named or required and response_format constrain the output with a grammar; a
// named call's whole output is its arguments, a required one's a JSON list of calls.
TEST_F(OpenAiProtocol, ForcedToolCallsAndResponseFormatsAreConstrained) {
  const std::string hi = R"({"messages": [{"role": "user", "content": "hi"}], )";
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
      {"type": "function", "function": {"name": "g"}}], )";
  const ParsedRequest named = parse(Endpoint::ChatCompletions,
                                    hi + tools + R"("tool_choice": {"type": "function", "function": {"name": "g"}}})");
  ASSERT_TRUE(named.engine.sampling.grammar);
  EXPECT_EQ(named.forced_tool, "g");
  ResponseBuilder named_response(named, *tokenizer_, "micro");
  for (const char* piece : {"{\"x\"", ": 1}"}) named_response.add(event(piece, {5}));
  StreamEvent last = event("", {}, true);
  last.finish_reason = "stop";
  named_response.add(last);
  const nlohmann::json named_message = named_response.final_response()["choices"][0];
  EXPECT_EQ(named_message["finish_reason"], "tool_calls");
  EXPECT_EQ(named_message["message"]["tool_calls"][0]["function"]["name"], "g");
  EXPECT_EQ(named_message["message"]["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");

  const ParsedRequest required = parse(Endpoint::ChatCompletions, hi + tools + R"("tool_choice": "required"})");
  EXPECT_TRUE(required.required_tool_calls && required.engine.sampling.grammar);
  ResponseBuilder required_response(required, *tokenizer_, "micro");
  StreamEvent whole =
      event(R"([{"name": "g", "parameters": {"b": 1, "a": 2}}, {"name": "f", "parameters": {}}])", {5}, true);
  whole.finish_reason = "stop";
  required_response.add(whole);
  const nlohmann::json calls = required_response.final_response()["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0]["function"]["name"], "g");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"b":1,"a":2})");  // the model's key order
  EXPECT_EQ(calls[1]["function"]["name"], "f");

  EXPECT_TRUE(
      parse(Endpoint::ChatCompletions, hi + R"("response_format": {"type": "json_object"}})").engine.sampling.grammar);

  // With a reasoning template, the answer reasons first: the reasoning is parsed out and the
  // document is the content; a forced call is JSON from its first token.
  parsing_ = {std::nullopt, true};
  const ParsedRequest thinking =
      parse(Endpoint::ChatCompletions, hi + R"("response_format": {"type": "json_object"}})");
  EXPECT_TRUE(thinking.engine.sampling.grammar && thinking.parsing.reasoning);
  ResponseBuilder thought(thinking, *tokenizer_, "micro");
  StreamEvent answer = event("<think>Easy.</think>\n{\"a\": 1}", {5}, true);
  answer.finish_reason = "stop";
  thought.add(answer);
  const nlohmann::json message = thought.final_response()["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "Easy.");
  EXPECT_EQ(message["content"], "\n{\"a\": 1}");
  EXPECT_FALSE(parse(Endpoint::ChatCompletions, hi + tools + R"("tool_choice": "required"})").parsing.reasoning);
  parsing_ = {};
  EXPECT_TRUE(
      parse(Endpoint::Completions, R"({"prompt": [1], "guided_json": {"type": "integer"}})").engine.sampling.grammar);
  EXPECT_FALSE(
      parse(Endpoint::ChatCompletions, hi + R"("response_format": {"type": "text"}})").engine.sampling.grammar);
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions, hi + R"("response_format": {"type": "json_schema"}})"),
            "response_format");
  EXPECT_EQ(
      refused_param(Endpoint::ChatCompletions,
                    hi + R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"not": {}}}}})"),
      "response_format");
  EXPECT_EQ(
      refused_param(Endpoint::ChatCompletions,  // a $ref cycle: no text to match, refused at parse time
                    hi + R"("response_format": {"type": "json_schema", "json_schema": {"schema": {"$ref": "#"}}}})"),
      "response_format");
  EXPECT_EQ(refused_param(Endpoint::Completions, R"({"prompt": [1], "guided_regex": "a+"})"), "guided_regex");
}

// With a tool-call and reasoning parser, a turn's text becomes reasoning_content, content and
// tool_calls: streamed as OpenAI streams them (a call's id and name first, then its arguments in
// pieces) and whole, and a turn that called tools finishes with "tool_calls".
TEST_F(OpenAiProtocol, ToolCallsAndReasoningAreParsedOutOfTheText) {
  parsing_ = {ToolCallFormat::KimiK2, true};
  const std::string body = R"({"messages": [{"role": "user", "content": "weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather"}}], "stream": true})";
  const ParsedRequest request = parse(Endpoint::ChatCompletions, body);
  EXPECT_TRUE(request.parsing.tools.has_value() && request.parsing.reasoning);
  EXPECT_FALSE(request.engine.skip_special_tokens);  // the markup is special tokens
  const std::vector<std::string> pieces = {
      "<think>It is",
      " cold.</th",
      "ink>Checking.<|tool_calls_sec",
      "tion_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"ci",
      "ty\": \"Oslo\"}",
      "<|tool_call_end|><|tool_calls_section_end|>"};
  ResponseBuilder stream(request, *tokenizer_, "micro");
  ResponseBuilder whole(request, *tokenizer_, "micro");
  nlohmann::json reasoning = "", content = "", calls = nlohmann::json::array(), finish;
  for (size_t i = 0; i < pieces.size(); ++i) {
    StreamEvent e = event(pieces[i], {5}, i + 1 == pieces.size());
    if (e.finished) e.finish_reason = "stop";
    whole.add(e);
    for (const std::string& text : stream.stream_chunks(e)) {
      const nlohmann::json choice = nlohmann::json::parse(text)["choices"][0];
      reasoning = reasoning.get<std::string>() + choice["delta"].value("reasoning_content", "");
      content = content.get<std::string>() + choice["delta"].value("content", "");
      for (const auto& call : choice["delta"].value("tool_calls", nlohmann::json::array())) calls.push_back(call);
      finish = choice["finish_reason"];
    }
  }
  EXPECT_EQ(reasoning, "It is cold.");
  EXPECT_EQ(content, "Checking.");
  ASSERT_EQ(calls.size(), 2u);  // the name with the arguments so far, then the rest of them
  EXPECT_EQ(calls[0]["id"], "functions.get_weather:0");
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"].get<std::string>() + calls[1]["function"]["arguments"].get<std::string>(),
            "{\"city\": \"Oslo\"}");
  EXPECT_EQ(calls[1]["index"], 0);
  EXPECT_FALSE(calls[1].contains("id"));
  EXPECT_EQ(finish, "tool_calls");

  const nlohmann::json message = whole.final_response()["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "It is cold.");
  EXPECT_EQ(message["content"], "Checking.");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_EQ(whole.final_response()["choices"][0]["finish_reason"], "tool_calls");
}

// A Kimi K3 tokenizer: the 256 bytes as tiktoken ranks, K3's special tokens after them.
std::unique_ptr<Tokenizer> kimi_k3_tokenizer() {
  static const char* const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string ranks;
  for (int b = 0; b < 256; ++b)
    ranks += std::string{alphabet[b >> 2], alphabet[(b & 3) << 4], '=', '='} + " " + std::to_string(b) + "\n";
  return Tokenizer::from_tiktoken(
      ranks, kKimiPattern,
      {{"<|end_of_msg|>", 258, true}, {"<|open|>", 259, true}, {"<|close|>", 260, true}, {"<|sep|>", 261, true}});
}

// K3's format end to end through the protocol: the prompt is the format's ids (/tokenize says
// the same), named and required tool choices and response_format decode under an XTML grammar,
// and the output's channels become reasoning, content and tool calls.
TEST_F(OpenAiProtocol, KimiK3ConversationsToolsAndChannels) {
  tokenizer_ = kimi_k3_tokenizer();
  chat_template_ = std::make_unique<ChatTemplate>(ChatTemplate::built_in(ChatFormat::KimiK3));
  parsing_ = chat_parsing("auto", "auto", "", true);
  max_model_len_ = 4096;  // K3's turns in byte tokens
  EXPECT_TRUE(parsing_.kimi_k3 && parsing_.reasoning && parsing_.tools == ToolCallFormat::KimiK3);
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  const std::string body = R"({"messages": [{"role": "user", "content": "weather?"}], "tools": )" + tools +
                           R"(, "chat_template_kwargs": {"thinking_effort": "low"}})";
  const ParsedRequest request = parse(Endpoint::ChatCompletions, body);
  ChatInput input;
  input.messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "weather?"}])");
  input.tools = nlohmann::ordered_json::parse(tools);
  input.kwargs = {{"thinking_effort", "low"}};
  EXPECT_EQ(request.engine.prompt, chat_template_->encode(input, *tokenizer_));
  EXPECT_EQ(tokenize_request(body, {*tokenizer_, *chat_template_, "micro", max_model_len_, 512, generation_, parsing_}),
            request.engine.prompt);
  EXPECT_TRUE(request.prompt_end.ends_with("<|open|>think<|sep|>"));
  EXPECT_TRUE(request.parsing.kimi_k3 && request.parsing.tools == ToolCallFormat::KimiK3);
  EXPECT_FALSE(request.engine.sampling.grammar);  // tool_choice auto: free, then parsed
  EXPECT_FALSE(request.engine.skip_special_tokens);

  const std::vector<std::string> pieces = {
      "Need it.<|close|>th", "ink<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>",
      "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|><|open|>argument key=\"city\" type=\"st",
      "ring\"<|sep|>Oslo<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>"};
  ResponseBuilder whole(request, *tokenizer_, "micro");
  for (size_t i = 0; i < pieces.size(); ++i) {
    StreamEvent e = event(pieces[i], {5}, i + 1 == pieces.size());
    if (e.finished) e.finish_reason = "stop";
    whole.add(e);
  }
  const nlohmann::json choice = whole.final_response()["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Need it.");
  EXPECT_EQ(choice["message"]["content"], "Checking.");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Oslo\"}");
  EXPECT_EQ(choice["finish_reason"], "tool_calls");

  const std::string named = R"({"messages": [{"role": "user", "content": "weather?"}], "tools": )" + tools +
                            R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})";
  const ParsedRequest forced = parse(Endpoint::ChatCompletions, named);
  EXPECT_TRUE(forced.engine.sampling.grammar && forced.forced_tool.empty() && forced.parsing.tools.has_value());
  EXPECT_TRUE(forced.prompt_end.ends_with("<|open|>response<|sep|>"));  // a named call turns thinking off
  const ParsedRequest json_answer =
      parse(Endpoint::ChatCompletions,
            R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  EXPECT_TRUE(json_answer.engine.sampling.grammar && json_answer.parsing.reasoning);
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions,
                          R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {}})"),
            "guided_json");
  EXPECT_EQ(refused_param(Endpoint::ChatCompletions,
                          R"({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "medium"})"),
            "reasoning_effort");
  EXPECT_EQ(refused_param(
                Endpoint::ChatCompletions,
                R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"thinking_effort": 3}})"),
            "chat_template_kwargs");
}

}  // namespace
}  // namespace mlaserve
