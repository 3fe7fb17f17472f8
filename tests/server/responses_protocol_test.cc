// OpenAI's Responses API on its own: input items and instructions mapped to the chat request they
// mean (after a stored conversation), hostile bodies refused naming the field, and the engine's
// events as output items, typed stream events and a stored response.
#include "server/responses_protocol.h"

#include <gtest/gtest.h>

namespace mlaserve {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

TEST(ResponsesProtocol, ItemsMapToTheChatRequestTheyMean) {
  ResponseStore store;
  const ResponsesRequest request = responses_to_chat(ojson::parse(R"({"model": "m", "instructions": "Be brief.",
    "max_output_tokens": 9, "temperature": 0.5, "parallel_tool_calls": false, "reasoning": {"effort": "low"},
    "tools": [{"type": "function", "name": "f", "description": "F", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "f"},
    "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}},
    "input": [
      {"role": "user", "content": "Hi"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Think."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Calling."}]},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{\"a\": 1}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Go on."}]}]})"),
                                                     store);
  const ojson conversation = ojson::parse(R"([
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": [{"type": "text", "text": "Calling."}], "reasoning_content": "Think.",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                      {"id": "c2", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "one"},
      {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "two"}]},
      {"role": "developer", "content": [{"type": "text", "text": "Go on."}]}])");
  EXPECT_EQ(request.conversation, conversation) << request.conversation.dump(2);
  ojson messages = conversation;
  messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", "Be brief."}});
  EXPECT_EQ(request.chat,
            ojson::parse(R"({"model": "m", "temperature": 0.5, "parallel_tool_calls": false, "max_tokens": 9,
      "messages": )" + messages.dump() +
                         R"(,
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "description": "F"}}],
      "tool_choice": {"type": "function", "function": {"name": "f"}},
      "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
      "reasoning_effort": "low"})"))
      << request.chat.dump(2);
  EXPECT_TRUE(request.store);
  EXPECT_EQ(request.echo["instructions"], "Be brief.");

  // previous_response_id: the stored conversation first; instructions are not carried over.
  store.put("resp_1", json::object(), conversation);
  const ResponsesRequest next = responses_to_chat(ojson::parse(R"({"previous_response_id": "resp_1", "input": "More",
      "reasoning": {"effort": "none"}, "store": false})"),
                                                  store);
  ASSERT_EQ(next.chat["messages"].size(), conversation.size() + 1);
  EXPECT_EQ(next.chat["messages"].back(), ojson::parse(R"({"role": "user", "content": "More"})"));
  EXPECT_EQ(next.chat["chat_template_kwargs"]["thinking"], false);
  EXPECT_FALSE(next.store);
  try {
    responses_to_chat(ojson::parse(R"({"previous_response_id": "resp_gone", "input": "x"})"), store);
    ADD_FAILURE() << "an unknown id accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.param, "previous_response_id");
  }
}

TEST(ResponsesProtocol, HostileBodiesNameTheField) {
  const ResponseStore store;
  auto field_of = [&](const std::string& body) -> std::string {
    try {
      responses_to_chat(ojson::parse(body), store);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      return e.param;
    }
    ADD_FAILURE() << "accepted: " << body;
    return "";
  };
  EXPECT_EQ(field_of(R"({})"), "input");
  EXPECT_EQ(field_of(R"({"input": []})"), "input");
  EXPECT_EQ(field_of(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "input");
  EXPECT_EQ(field_of(R"({"input": [{"role": "robot", "content": "x"}]})"), "input");
  EXPECT_EQ(field_of(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})"),
            "input");
  EXPECT_EQ(field_of(R"({"input": [{"type": "function_call", "name": "f"}]})"), "input");
  EXPECT_EQ(field_of(R"({"input": "x", "tools": [{"type": "web_search"}]})"), "tools");
  EXPECT_EQ(field_of(R"({"input": "x", "tool_choice": {"type": "mcp"}})"), "tool_choice");
  EXPECT_EQ(field_of(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), "text");
  EXPECT_EQ(field_of(R"({"input": "x", "instructions": 3})"), "instructions");
  EXPECT_EQ(field_of(R"({"input": "x", "store": "yes"})"), "store");
}

StreamEvent finished_text(const std::string& text, bool finished = false) {
  StreamEvent event;
  event.text = text;
  event.finished = finished;
  if (finished) {
    event.finish_reason = "stop";
    event.prompt_tokens = 20;
    event.cached_tokens = 16;
    event.completion_tokens = 5;
  }
  return event;
}

TEST(ResponsesProtocol, EventsBecomeItemsAndAStoredResponse) {
  ParsedRequest request;
  request.endpoint = Endpoint::ChatCompletions;
  request.parsing = {ToolCallFormat::KimiK2, true};
  ResponseStore store;
  ResponsesRequest responses;
  responses.conversation = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  responses.echo = {{"store", true}};
  const std::vector<std::string> pieces = {
      "<think>Cold.</think>Check", "ing.<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0",
      "<|tool_call_argument_begin|>{\"a\": 1}<|tool_call_end|><|tool_calls_section_end|>"};
  ResponseAnswer streamed(request, responses, "m", store), whole(request, responses, "m", store);
  std::vector<json> events;
  std::vector<std::string> frames = streamed.stream_start();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const StreamEvent event = finished_text(pieces[i], i + 1 == pieces.size());
    for (const std::string& frame : streamed.stream_event(event)) frames.push_back(frame);
    whole.add(event);
  }
  std::vector<std::string> types;
  for (size_t i = 0; i < frames.size(); ++i) {
    const json event = json::parse(frames[i].substr(frames[i].find("data: ") + 6));
    EXPECT_EQ(event["sequence_number"], i);
    types.push_back(event["type"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"response.created",
                                             "response.in_progress",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.reasoning_text.delta",
                                             "response.reasoning_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.content_part.added",
                                             "response.output_text.delta",
                                             "response.output_text.delta",
                                             "response.output_text.done",
                                             "response.content_part.done",
                                             "response.output_item.done",
                                             "response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done",
                                             "response.completed"}));
  const json response = whole.response();
  ASSERT_EQ(response["output"].size(), 3u);
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "Cold.");
  EXPECT_EQ(response["output"][1]["content"][0],
            json::parse(R"({"type": "output_text", "text": "Checking.", "annotations": []})"));
  EXPECT_EQ(response["output"][2]["arguments"], "{\"a\": 1}");
  EXPECT_EQ(response["output"][2]["call_id"], "functions.f:0");
  EXPECT_EQ(response["status"], "completed");
  EXPECT_EQ(response["usage"]["input_tokens_details"]["cached_tokens"], 16);
  const auto conversation = store.conversation(response["id"]);
  ASSERT_TRUE(conversation.has_value());
  EXPECT_EQ(conversation->back(),
            ojson::parse(R"({"role": "assistant", "content": "Checking.", "reasoning_content": "Cold.",
      "tool_calls": [{"id": "functions.f:0", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]})"));
  EXPECT_EQ(store.response(response["id"]), response);
  EXPECT_TRUE(store.erase(response["id"]));
  EXPECT_FALSE(store.response(response["id"]).has_value());
}

TEST(ResponseStore, KeepsTheNewestUpToItsCapacity) {
  ResponseStore store(2);
  for (const char* id : {"a", "b", "c"}) store.put(id, {{"id", id}}, ojson::array());
  EXPECT_FALSE(store.response("a").has_value());
  EXPECT_TRUE(store.response("b").has_value() && store.response("c").has_value());
}

}  // namespace
}  // namespace mlaserve
