// Kimi K3's output in its XTML channels, split as OpenAI's API returns it: the think channel is
// reasoning_content, the response channel content, and the tools block's calls tool_calls whose
// arguments are the JSON object the typed arguments spell:
//   REASONING<|close|>think<|sep|><|open|>response<|sep|>TEXT<|close|>response<|sep|>
//   <|open|>tools<|sep|><|open|>call tool="NAME" index="1"<|sep|>
//     <|open|>argument key="K" type="string"<|sep|>VALUE<|close|>argument<|sep|> ...
//   <|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>
// String values are raw text (JSON-quoted here); number, boolean, null, object and array values
// are JSON as written (text that is not JSON becomes a string); a raw <|open|>json type="object"
// block passes through as the arguments. The text streams in pieces cut anywhere; only what is
// certain is returned, so the pieces add up to the same result however the text is cut.
#pragma once
#include <string>
#include <string_view>

#include "server/chat_output.h"
#include "tokenizer/kimi_k3_chat.h"

namespace mlaserve {

class KimiK3OutputParser {
 public:
  // `opened`: where the prompt left the output; output that opens its own channel is read either
  // way. parse_reasoning false: the think channel is content. parse_calls false: the tools block
  // is dropped (a request without tools).
  KimiK3OutputParser(KimiK3Opened opened, bool parse_reasoning, bool parse_calls);
  ChatDelta feed(std::string_view text);
  ChatDelta finish();  // held text to its channel (a call cut off keeps what it streamed)

 private:
  enum class State { Message, Think, Response, Tools, Call, Argument, Json, Done };
  bool step(ChatDelta& out);  // consumes what it can decide; false when it needs more text
  bool text_channel(ChatDelta& out);
  bool structure(ChatDelta& out);
  void on_tag(std::string_view tag, bool opens, ChatDelta& out);
  void emit_text(std::string_view text, ChatDelta& out);
  void emit_arguments(std::string text, ChatDelta& out);
  void end_argument(ChatDelta& out);
  void end_call(ChatDelta& out);

  State state_;
  bool fresh_ = true;  // nothing read yet in the current channel (its own opening is skipped)
  bool parse_reasoning_, parse_calls_;
  std::string buffer_;
  int calls_ = 0;               // calls started
  int arguments_ = 0;           // typed arguments of the current call
  bool raw_arguments_ = false;  // the current call's arguments are a json block
  std::string argument_type_, argument_value_;
};

}  // namespace mlaserve
