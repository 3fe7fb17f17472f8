#include "tokenizer/chat_template.h"

#include "base/error.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

// DeepSeek-V3 tokenizer_config.json chat_template: BOS, then every system message joined
// by blank lines, then <｜User｜>content and <｜Assistant｜>content<｜end▁of▁sentence｜> turns.
std::string deepseek_v3(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string system_prompt;
  bool first_system = true;
  for (const auto& message : messages) {
    if (message.role != "system") continue;
    system_prompt += (first_system ? "" : "\n\n") + message.content;
    first_system = false;
  }
  std::string out = "<｜begin▁of▁sentence｜>" + system_prompt;
  for (const auto& message : messages) {
    if (message.role == "user")
      out += "<｜User｜>" + message.content;
    else if (message.role == "assistant")
      out += "<｜Assistant｜>" + message.content + "<｜end▁of▁sentence｜>";
    else
      MLA_CHECK(message.role == "system", "chat message role '{}' is not supported (system, user, assistant)",
                message.role);
  }
  if (add_generation_prompt) out += "<｜Assistant｜>";
  return out;
}

// Kimi K2 chat_template.jinja: a default system turn when the first message is not one, then
// <|im_ROLE|>ROLE<|im_middle|>content<|im_end|> per message.
std::string kimi_k2(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out;
  if (!messages.empty() && messages[0].role != "system")
    out += "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>";
  for (const auto& message : messages) {
    if (message.role == "system")
      out += "<|im_system|>system<|im_middle|>";
    else if (message.role == "user")
      out += "<|im_user|>user<|im_middle|>";
    else if (message.role == "assistant")
      out += "<|im_assistant|>assistant<|im_middle|>";
    else
      fail("chat message role '{}' is not supported (system, user, assistant)", message.role);
    out += message.content + "<|im_end|>";
  }
  if (add_generation_prompt) out += "<|im_assistant|>assistant<|im_middle|>";
  return out;
}

}  // namespace

ChatFormat chat_format_of(const Tokenizer& tokenizer) {
  if (tokenizer.token_id("<|im_user|>")) return ChatFormat::KimiK2;
  if (tokenizer.token_id("<｜User｜>")) return ChatFormat::DeepseekV3;
  fail("the tokenizer has neither DeepSeek-V3 (<｜User｜>) nor Kimi (<|im_user|>) chat tokens");
}

std::string apply_chat_template(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
  return format == ChatFormat::KimiK2 ? kimi_k2(messages, add_generation_prompt)
                                      : deepseek_v3(messages, add_generation_prompt);
}

}  // namespace mlaserve
