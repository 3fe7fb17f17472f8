// The reasoning and tool-call parsers on model-format text: what they split out fed whole, and
// the same when the text arrives cut at every byte boundary or one byte at a time (a piece that
// may start a marker is held, never sent as content).
#include "server/chat_output.h"

#include <gtest/gtest.h>

#include <functional>

namespace mlaserve {
namespace {

using MakeParser = std::function<ChatOutputParser()>;

ChatDelta parse_in_pieces(const MakeParser& make, const std::string& text, const std::vector<size_t>& cuts) {
  ChatOutputParser parser = make();
  ChatDelta out;
  size_t from = 0;
  for (size_t cut : cuts) {
    out.append(parser.feed(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  out.append(parser.feed(std::string_view(text).substr(from)));
  out.append(parser.finish());
  return out;
}

::testing::AssertionResult same(const ChatDelta& got, const ChatDelta& want) {
  if (got.reasoning != want.reasoning) return ::testing::AssertionFailure() << "reasoning '" << got.reasoning << "'";
  if (got.content != want.content) return ::testing::AssertionFailure() << "content '" << got.content << "'";
  if (got.tool_calls.size() != want.tool_calls.size())
    return ::testing::AssertionFailure() << got.tool_calls.size() << " tool calls";
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    const ToolCallDelta &g = got.tool_calls[i], &w = want.tool_calls[i];
    if (g.index != w.index || g.id != w.id || g.name != w.name || g.arguments != w.arguments)
      return ::testing::AssertionFailure()
             << "call " << i << ": " << g.index << " '" << g.id << "' '" << g.name << "' '" << g.arguments << "'";
  }
  return ::testing::AssertionSuccess();
}

// Whole, split once at every byte, and byte by byte: the same result each time.
void expect_parsed(const MakeParser& make, const std::string& text, const ChatDelta& want) {
  EXPECT_TRUE(same(parse_in_pieces(make, text, {}), want)) << "whole";
  for (size_t cut = 1; cut < text.size(); ++cut)
    ASSERT_TRUE(same(parse_in_pieces(make, text, {cut}), want)) << "cut at byte " << cut;
  std::vector<size_t> every_byte;
  for (size_t cut = 1; cut < text.size(); ++cut) every_byte.push_back(cut);
  EXPECT_TRUE(same(parse_in_pieces(make, text, every_byte), want)) << "byte by byte";
}

MakeParser tools(ToolCallFormat format) {
  return [format] { return ChatOutputParser(ChatParsing{format, false}, ""); };
}

MakeParser reasoning(bool opened_in_prompt, std::optional<ToolCallFormat> format = std::nullopt) {
  return [=] {
    return ChatOutputParser(ChatParsing{format, true}, opened_in_prompt ? "<|User|>Hi<think>\n" : "<|User|>Hi");
  };
}

TEST(ToolCallParser, KimiK2) {
  const std::string text =
      "Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>"
      "functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
  expect_parsed(tools(ToolCallFormat::KimiK2), text,
                {"",
                 "Let me check.",
                 {{0, "functions.get_weather:0", "get_weather", "{\"city\": \"Paris\"}"},
                  {1, "functions.get_time:1", "get_time", "{}"}}});
}

TEST(ToolCallParser, DeepseekV31) {
  const std::string text =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"query\": \"mlaserve ｜ MLA\"}"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_parsed(tools(ToolCallFormat::DeepseekV31), text,
                {"", "", {{0, "", "search", "{\"query\": \"mlaserve ｜ MLA\"}"}}});
}

TEST(ToolCallParser, DeepseekV3) {
  const std::string text =
      "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
      "{\"city\": \"Tokyo\", \"days\": 2}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  expect_parsed(
      tools(ToolCallFormat::DeepseekV3), text,
      {"", "Sure.", {{0, "", "get_weather", "{\"city\": \"Tokyo\", \"days\": 2}"}, {1, "", "get_time", "{}"}}});
}

TEST(ToolCallParser, ProseThatLooksLikeACallIsContent) {
  const std::string kimi = "Call functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"} yourself.";
  expect_parsed(tools(ToolCallFormat::KimiK2), kimi, {"", kimi, {}});
  const std::string deepseek =
      "It looks like get_weather\n```json\n{\"city\": \"Tokyo\"}\n``` but is prose <｜tool▁sep｜>.";
  expect_parsed(tools(ToolCallFormat::DeepseekV3), deepseek, {"", deepseek, {}});
}

TEST(ToolCallParser, TextAfterTheSectionIsContentAndACutOffCallKeepsItsArguments) {
  expect_parsed(
      tools(ToolCallFormat::DeepseekV31),
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>done",
      {"", "done", {{0, "", "f", "{}"}}});
  expect_parsed(tools(ToolCallFormat::KimiK2),
                "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1",
                {"", "", {{0, "functions.f:0", "f", "{\"a\": 1"}}});
}

TEST(ToolCallParser, FormatsByNameAndFromTemplates) {
  EXPECT_EQ(tool_call_format_from_name("kimi_k2"), ToolCallFormat::KimiK2);
  EXPECT_THROW(tool_call_format_from_name("hermes"), std::exception);
  EXPECT_EQ(tool_call_format_of_template("{{ '<|tool_call_begin|>' }}"), ToolCallFormat::KimiK2);
  EXPECT_EQ(tool_call_format_of_template("'<｜tool▁call▁begin｜>' + '```json'"), ToolCallFormat::DeepseekV3);
  EXPECT_EQ(tool_call_format_of_template("'<｜tool▁call▁begin｜>' + name"), ToolCallFormat::DeepseekV31);
  EXPECT_FALSE(tool_call_format_of_template("{{ messages }}").has_value());
}

TEST(ReasoningParser, ThinkBlocks) {
  expect_parsed(reasoning(true), "The user wants 4.</think>2+2 = 4.", {"The user wants 4.", "2+2 = 4.", {}});
  expect_parsed(reasoning(false), "<think>Short.</think>Answer <think> kept.", {"Short.", "Answer <think> kept.", {}});
  expect_parsed(reasoning(false), "No thinking here.", {"", "No thinking here.", {}});
  expect_parsed(reasoning(false), "<thin", {"", "<thin", {}});
  expect_parsed(reasoning(true), "cut off while thinking </thi", {"cut off while thinking </thi", "", {}});
}

TEST(ReasoningParser, ToolCallsAfterReasoning) {
  const std::string text =
      "<think>Need the weather <|tool_call_begin|> not yet.</think>Checking.<|tool_calls_section_begin|>"
      "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Oslo\"}<|tool_call_end|>"
      "<|tool_calls_section_end|>";
  expect_parsed(reasoning(false, ToolCallFormat::KimiK2), text,
                {"Need the weather <|tool_call_begin|> not yet.",
                 "Checking.",
                 {{0, "functions.get_weather:0", "get_weather", "{\"city\": \"Oslo\"}"}}});
}

// Kimi K3's channels (server/kimi_k3_output.h), from where the prompt left the output.
MakeParser kimi_k3(const std::string& prompt_end, bool calls = true) {
  const std::optional<ToolCallFormat> format = calls ? std::optional(ToolCallFormat::KimiK3) : std::nullopt;
  return [=] { return ChatOutputParser(ChatParsing{format, true, true}, prompt_end); };
}

const std::string kThinkOpened = "<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>";
const std::string kResponseOpened = "<|open|>message role=\"assistant\"<|sep|><|open|>response<|sep|>";
const std::string kMessageOpened = "<|open|>message role=\"assistant\"<|sep|>";
const std::string kAnswer = "<|open|>response<|sep|>It is <b>sunny</b>.<|close|>response<|sep|><|close|>message<|sep|>";

TEST(KimiK3Output, ReasoningThenContent) {
  expect_parsed(kimi_k3(kThinkOpened), "Sun < rain | maybe.<|close|>think<|sep|>" + kAnswer,
                {"Sun < rain | maybe.", "It is <b>sunny</b>.", {}});
  // The model opening its channel again, the prompt having opened it or not.
  expect_parsed(kimi_k3(kThinkOpened), "<|open|>think<|sep|>Hm.<|close|>think<|sep|>" + kAnswer,
                {"Hm.", "It is <b>sunny</b>.", {}});
  expect_parsed(kimi_k3(kMessageOpened), "<|open|>think<|sep|>Hm.<|close|>think<|sep|>" + kAnswer,
                {"Hm.", "It is <b>sunny</b>.", {}});
  expect_parsed(kimi_k3(kResponseOpened), "Hi.<|close|>response<|sep|><|close|>message<|sep|>", {"", "Hi.", {}});
  expect_parsed(kimi_k3(kResponseOpened), "<|open|>response<|sep|>Hi.<|close|>response<|sep|>", {"", "Hi.", {}});
  expect_parsed(kimi_k3(kThinkOpened), "cut off while thinking <|close|>thi",
                {"cut off while thinking <|close|>thi", "", {}});
}

TEST(KimiK3Output, TypedArgumentsBecomeAJsonObject) {
  const std::string text =
      "Need weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|><|open|>tools<|sep|>"
      "<|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
      "<|open|>argument key=\"city\" type=\"string\"<|sep|>Paris \"Nord\"\\\n<|close|>argument<|sep|>"
      "<|open|>argument key=\"days\" type=\"number\"<|sep|>2<|close|>argument<|sep|>"
      "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"a\": [1, true]}<|close|>argument<|sep|>"
      "<|open|>argument key=\"k&quot;\" type=\"number\"<|sep|>two<|close|>argument<|sep|>"
      "<|close|>call<|sep|>"
      "<|open|>call tool=\"a&amp;b\" index=\"2\"<|sep|><|open|>json type=\"object\"<|sep|>{\"x\":1}<|close|>json<|sep|>"
      "<|close|>call<|sep|><|open|>call tool=\"now\" index=\"3\"<|sep|><|close|>call<|sep|>"
      "<|close|>tools<|sep|><|close|>message<|sep|>";
  expect_parsed(
      kimi_k3(kThinkOpened), text,
      {"Need weather.",
       "Checking.",
       {{0, "", "get_weather",
         "{\"city\": \"Paris \\\"Nord\\\"\\\\\\n\", \"days\": 2, \"opts\": {\"a\": [1, true]}, \"k\\\"\": \"two\"}"},
        {1, "", "a&b", "{\"x\":1}"},
        {2, "", "now", "{}"}}});
  // A request without tools: the block is dropped.
  expect_parsed(kimi_k3(kThinkOpened, false), text, {"Need weather.", "Checking.", {}});
  // Cut off inside a string value: what streamed stays.
  expect_parsed(kimi_k3(kResponseOpened),
                "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"f\" index=\"1\"<|sep|>"
                "<|open|>argument key=\"q\" type=\"string\"<|sep|>abc<|clo",
                {"", "", {{0, "", "f", "{\"q\": \"abc<|clo"}}});
}

// A call's name arrives in its own step before any argument, as OpenAI streams it.
TEST(ToolCallParser, TheNameStepComesFirst) {
  ToolCallParser parser(ToolCallFormat::KimiK2);
  const ChatDelta first =
      parser.feed("<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\"");
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "f");
  EXPECT_EQ(first.tool_calls[0].arguments, "{\"a\"");
  const ChatDelta second = parser.feed(": 1}<|tool_call_end|>");
  ASSERT_EQ(second.tool_calls.size(), 1u);
  EXPECT_TRUE(second.tool_calls[0].name.empty());
  EXPECT_EQ(second.tool_calls[0].arguments, ": 1}");
}

}  // namespace
}  // namespace mlaserve
