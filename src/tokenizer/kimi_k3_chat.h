// Kimi K3's conversation protocol, XTML, as the checkpoint's encoding_k3.py renders it: protocol
// markers that are special tokens (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>) with tag names,
// attributes, message text and tool JSON between them as ordinary text.
//   <|open|>message role="user"<|sep|>TEXT<|close|>message<|sep|><|end_of_msg|>
// Assistant turns hold a think channel (thinking mode only), a response channel and a tools
// block of typed calls; tool declarations, the thinking effort, tool_choice and response_format
// are system turns with a type attribute. docs/kimi.md describes every rule.
#pragma once
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"

namespace mlaserve {

namespace kimi_k3 {
inline constexpr std::string_view kOpen = "<|open|>", kClose = "<|close|>", kSep = "<|sep|>",
                                  kEndOfMessage = "<|end_of_msg|>", kMask = "<|MASK|>";
}  // namespace kimi_k3

// Where K3's output begins: inside the assistant message before any channel (the prompt opened
// only the message, as Moonshot's API does), or inside the think or response channel that the
// generation prompt opened (as the checkpoint's encoder does).
enum class KimiK3Opened { Message, Think, Response };
KimiK3Opened kimi_k3_opened(std::string_view prompt_text);

// The conversation as K3's segments. input.kwargs: thinking (default true), thinking_effort
// (low, high, max; default input.reasoning_effort, else max). A named tool_choice turns thinking
// off. open_channel: the generation prompt opens the think or response channel too. Throws
// ChatInputError naming a bad field, Error for a message K3 cannot render.
std::vector<PromptSegment> render_kimi_k3(const ChatInput& input, bool open_channel);

}  // namespace mlaserve
