// Chat templates of the DeepSeek-V3 and Kimi K2 formats, as code (system/user/assistant
// turns). They render the same strings as the Jinja templates the models ship.
#pragma once
#include <string>
#include <vector>

namespace mlaserve {

class Tokenizer;

enum class ChatFormat { DeepseekV3, KimiK2 };

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// The format whose role tokens the tokenizer has (<｜User｜> or <|im_user|>); throws otherwise.
ChatFormat chat_format_of(const Tokenizer& tokenizer);

// Throws Error on a role the format does not support.
std::string apply_chat_template(ChatFormat format, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

}  // namespace mlaserve
