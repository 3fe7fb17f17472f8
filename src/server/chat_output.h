// A chat completion's text split as the model was trained to write it: reasoning between
// <think> and </think>, tool calls in the model's own markup (DeepSeek-V3, DeepSeek-V3.1, Kimi K2),
// and content; or Kimi K3's XTML channels (server/kimi_k3_output.h). The parsers take the text as it streams, in pieces
// cut anywhere, and return only what is certain: a piece that may be the start of a marker is held until the next one
// decides.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve {

// One step of one tool call: the first step of a call carries its index, id (when the format
// has one) and name; later steps carry the next piece of its JSON arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id, name;
  std::string arguments;
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(const ChatDelta& later);  // later pieces of the same call merge into one step
};

enum class ToolCallFormat {
  DeepseekV3,  // <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
  DeepseekV31,  // <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>
  KimiK2,       // <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>ARGS<|tool_call_end|>
  KimiK3,       // <|open|>call tool="NAME" index="1"<|sep|> typed arguments <|close|>call<|sep|>
};

// --tool-parser's names (vLLM's): deepseek_v3, deepseek_v31, kimi_k2, kimi_k3; throws Error otherwise.
ToolCallFormat tool_call_format_from_name(std::string_view name);
const char* tool_call_format_name(ToolCallFormat format);
// The format a chat template writes assistant tool calls in, if it writes any.
std::optional<ToolCallFormat> tool_call_format_of_template(std::string_view template_source);

// What a server parses out of chat output: --tool-parser and --reasoning-parser as given, or
// ("auto") the tool-call format and <think> blocks the chat template writes, or K3's channels
// with K3's format ("none": nothing). Reasoning parsers: deepseek_r1, deepseek_v3, kimi_k2 (all
// <think>…</think>), kimi_k3 (the think channel). Throws Error on an unknown name.
struct ChatParsing {
  std::optional<ToolCallFormat> tools;
  bool reasoning = false;
  bool kimi_k3 = false;  // the output is in K3's channels, whatever the request asks to parse
};
ChatParsing chat_parsing(std::string_view tool_parser, std::string_view reasoning_parser,
                         std::string_view template_source, bool kimi_k3_format = false);

// Tool calls inside a tool-call section (<｜tool▁calls▁begin｜>... or
// <|tool_calls_section_begin|>...); text outside sections is content, so markup-like prose is
// not a call. Arguments stream as they come, not checked as JSON.
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);
  ~ToolCallParser();
  ChatDelta feed(std::string_view text);
  // The end of the output: held text becomes content (a call cut off keeps what it streamed).
  ChatDelta finish();

 private:
  struct Markup;
  static const Markup& markup_of(ToolCallFormat format);
  enum class State { Content, Section, Header, Arguments };
  bool step(ChatDelta& out);  // consumes what it can decide; false when it needs more text
  const Markup& markup_;
  State state_ = State::Content;
  std::string buffer_;
  size_t header_field_ = 0;
  std::string header_;  // the call's header fields so far
  int calls_ = 0;
};

// <think>…</think> reasoning. `opened_in_prompt`: the prompt already ends with <think> (the
// template opened it), so the output starts as reasoning; otherwise a <think> at the very start
// opens it. Without a </think>, everything after the opening is reasoning (as vLLM's parsers).
class ReasoningParser {
 public:
  explicit ReasoningParser(bool opened_in_prompt);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();

 private:
  enum class State { Start, Reasoning, Content };
  State state_;
  std::string buffer_;
};

// Whether the prompt ends with <think> (whitespace aside): the output starts as reasoning.
bool think_opened_in_prompt(std::string_view prompt_text);

class KimiK3OutputParser;

// Reasoning first, then tool calls in the content that follows it; or K3's channels. The prompt's
// text tells where the output begins (a <think> or K3 channel the prompt opened).
class ChatOutputParser {
 public:
  ChatOutputParser(const ChatParsing& parsing, std::string_view prompt_text);
  ChatOutputParser(ChatOutputParser&&) noexcept;
  ~ChatOutputParser();
  ChatDelta feed(std::string_view text);
  ChatDelta finish();

 private:
  ChatDelta tools_on_content(ChatDelta delta);
  std::optional<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  std::unique_ptr<KimiK3OutputParser> kimi_k3_;
};

}  // namespace mlaserve
