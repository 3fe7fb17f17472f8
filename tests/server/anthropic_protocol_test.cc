// Anthropic's Messages API on its own: a body mapped to the chat request it means (blocks, tools,
// tool_choice, thinking), hostile bodies refused naming the field, and the engine's events as
// Anthropic's content blocks, stream events and stop reasons.
#include "server/anthropic_protocol.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

namespace mlaserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

TEST(AnthropicProtocol, BodiesMapToTheChatRequestTheyMean) {
  const ojson chat = messages_to_chat(ojson::parse(R"({"model": "m", "max_tokens": 9, "temperature": 0.5, "top_k": 3,
    "system": [{"type": "text", "text": "Be brief."}], "stop_sequences": ["END"],
    "tools": [{"name": "get_weather", "description": "Weather", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true}, "thinking": {"type": "enabled", "budget_tokens": 2048},
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "Look it up.", "signature": "x"},
        {"type": "redacted_thinking", "data": "y"}, {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo"}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "cold", "is_error": false},
        {"type": "text", "text": "And tomorrow?"}]}]})"));
  EXPECT_EQ(chat, ojson::parse(R"({"model": "m", "temperature": 0.5, "top_k": 3, "max_tokens": 9,
    "messages": [
      {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": [{"type": "text", "text": "Checking."}], "reasoning_content": "Look it up.",
       "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "cold"},
      {"role": "user", "content": [{"type": "text", "text": "And tomorrow?"}]}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}, "description": "Weather"}}],
    "tool_choice": "required", "parallel_tool_calls": false,
    "chat_template_kwargs": {"thinking": true, "enable_thinking": true}, "stop": ["END"]})"))
      << chat.dump(2);
  const ojson named = messages_to_chat(ojson::parse(R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}],
    "tool_choice": {"type": "tool", "name": "f"}, "thinking": {"type": "disabled"}})"));
  EXPECT_EQ(named["tool_choice"], ojson::parse(R"({"type": "function", "function": {"name": "f"}})"));
  EXPECT_EQ(named["chat_template_kwargs"]["thinking"], false);
  EXPECT_FALSE(messages_to_chat(ojson::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), true)
                   .contains("max_tokens"));
}

TEST(AnthropicProtocol, HostileBodiesNameTheField) {
  auto field_of = [](const std::string& body) -> std::string {
    try {
      messages_to_chat(ojson::parse(body));
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      return e.param;
    }
    ADD_FAILURE() << "accepted: " << body;
    return "";
  };
  const std::string ok = R"("max_tokens": 5, "messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(field_of(R"({"messages": [{"role": "user", "content": "x"}]})"), "max_tokens");
  EXPECT_EQ(field_of(R"({"max_tokens": 5, "messages": []})"), "messages");
  EXPECT_EQ(field_of(R"({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]})"), "messages");
  EXPECT_EQ(field_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]})"),
            "messages");
  EXPECT_EQ(
      field_of(
          R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})"),
      "messages");
  EXPECT_EQ(
      field_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})"),
      "messages");
  EXPECT_EQ(field_of(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})"),
            "messages");
  EXPECT_EQ(field_of("{" + ok + R"(, "system": 3})"), "system");
  EXPECT_EQ(field_of("{" + ok + R"(, "tools": [{"type": "web_search_20250305", "name": "web_search"}]})"), "tools");
  EXPECT_EQ(field_of("{" + ok + R"(, "tools": {}})"), "tools");
  EXPECT_EQ(field_of("{" + ok + R"(, "tool_choice": {"type": "tool"}})"), "tool_choice");
  EXPECT_EQ(field_of("{" + ok + R"(, "thinking": {"type": "enabled"}})"), "thinking");
  EXPECT_EQ(field_of("{" + ok + R"(, "temperature": 1.5})"), "temperature");
  EXPECT_EQ(field_of("{" + ok + R"(, "stop_sequences": "END"})"), "stop_sequences");
  EXPECT_EQ(anthropic_error_body(400, "bad")["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic_error_body(401, "bad")["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_body(503, "busy")["error"]["type"], "overloaded_error");
}

StreamEvent text_event(const std::string& text, bool finished = false, const std::string& reason = "stop") {
  StreamEvent event;
  event.text = text;
  event.finished = finished;
  if (finished) {
    event.finish_reason = reason;
    event.prompt_tokens = 30;
    event.cached_tokens = 16;
    event.completion_tokens = 7;
  }
  return event;
}

// The events' `type`s and, for deltas, what they carry.
std::vector<std::string> trace(const std::vector<std::string>& frames) {
  std::vector<std::string> out;
  for (const std::string& frame : frames) {
    EXPECT_TRUE(frame.starts_with("event: ") && frame.ends_with("\n\n")) << frame;
    const json event = json::parse(frame.substr(frame.find("data: ") + 6));
    EXPECT_EQ(frame.substr(7, frame.find('\n') - 7), event["type"].get<std::string>());
    std::vector<std::string> words = {event["type"]};
    if (event["type"] == "content_block_start") words.push_back(event["content_block"]["type"]);
    if (event["type"] == "content_block_delta") words.push_back(event["delta"].dump());
    if (event["type"] == "message_delta") words.push_back(event["delta"]["stop_reason"]);
    out.push_back(fmt::format("{}", fmt::join(words, " ")));
  }
  return out;
}

TEST(AnthropicProtocol, EventsBecomeBlocksAndStreamEvents) {
  ParsedRequest request;
  request.endpoint = Endpoint::ChatCompletions;
  request.engine.prompt = std::vector<int32_t>(30, 1);
  request.parsing = {ToolCallFormat::KimiK2, true};
  const std::vector<std::string> pieces = {
      "<think>Cold", ".</think>Check", "ing.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
      "<|tool_call_argument_begin|>{\"a\"", ": 1}<|tool_call_end|><|tool_calls_section_end|>"};
  MessageAnswer streamed(request, "m"), whole(request, "m");
  std::vector<std::string> frames = streamed.stream_start();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StreamEvent event = text_event(pieces[i], i + 1 == pieces.size());
    for (const std::string& frame : streamed.stream_event(event)) frames.push_back(frame);
    whole.add(event);
  }
  EXPECT_EQ(
      trace(frames),
      (std::vector<std::string>{
          "message_start", "ping", "content_block_start thinking",
          R"(content_block_delta {"thinking":"Cold","type":"thinking_delta"})",
          R"(content_block_delta {"thinking":".","type":"thinking_delta"})", "content_block_stop",
          "content_block_start text", R"(content_block_delta {"text":"Check","type":"text_delta"})",
          R"(content_block_delta {"text":"ing.","type":"text_delta"})", "content_block_stop",
          "content_block_start tool_use", R"(content_block_delta {"partial_json":"{\"a\"","type":"input_json_delta"})",
          R"(content_block_delta {"partial_json":": 1}","type":"input_json_delta"})", "content_block_stop",
          "message_delta tool_use", "message_stop"}));
  const json message = whole.response();
  EXPECT_EQ(message["content"], json::parse(R"([{"type": "thinking", "thinking": "Cold.", "signature": ""},
      {"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "functions.f:0", "name": "f", "input": {"a": 1}}])"));
  EXPECT_EQ(message["stop_reason"], "tool_use");
  EXPECT_EQ(message["usage"], json::parse(R"({"input_tokens": 14, "cache_read_input_tokens": 16,
      "cache_creation_input_tokens": 0, "output_tokens": 7})"));
}

TEST(AnthropicProtocol, StopReasons) {
  ParsedRequest request;
  request.endpoint = Endpoint::ChatCompletions;
  auto stop_reason = [&](StreamEvent last) {
    MessageAnswer answer(request, "m");
    answer.add(last);
    const json message = answer.response();
    return message["stop_reason"].get<std::string>() + "/" + message["stop_sequence"].dump();
  };
  EXPECT_EQ(stop_reason(text_event("Hi", true, "stop")), "end_turn/null");
  EXPECT_EQ(stop_reason(text_event("Hi", true, "length")), "max_tokens/null");
  StreamEvent stopped = text_event("Hi", true, "stop");
  stopped.stop_string = "END";
  EXPECT_EQ(stop_reason(stopped), "stop_sequence/\"END\"");
}

}  // namespace
}  // namespace mlaserve
