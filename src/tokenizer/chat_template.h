// The chat template a checkpoint ships (chat_template.jinja, or tokenizer_config.json's
// chat_template), rendered with src/jinja as transformers' apply_chat_template renders it; for a
// checkpoint that ships none, the built-in DeepSeek-V3 or Kimi K2 format its role tokens name.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mlaserve {

class Tokenizer;
namespace jinja {
class Template;
}

enum class ChatFormat { DeepseekV3, KimiK2 };

// A conversation as the template renders it, in OpenAI's message shape: role, content (a
// string, null, or a list of {"type": "text", "text"} parts), tool_calls, tool_call_id, ...
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null, or the tool definitions
  nlohmann::ordered_json documents;  // null, or documents for retrieval templates
  nlohmann::ordered_json kwargs;     // null, or extra template variables (chat_template_kwargs)
  bool add_generation_prompt = true;
  // Render the last (assistant) message open, to be continued; excludes add_generation_prompt.
  bool continue_final_message = false;
};

class ChatTemplate {
 public:
  // `override_path`, when set, replaces the checkpoint's template (--chat-template). Otherwise
  // DIR/chat_template.jinja, else tokenizer_config.json's chat_template (a string, or a list of
  // {name, template}: "default", and "tool_use" for requests with tools), else the built-in
  // format. A template that does not parse is an Error naming its file and line.
  static ChatTemplate load(const std::string& model_dir, const Tokenizer& tokenizer,
                           const std::string& override_path = "");
  // special_tokens: tokenizer_config.json's bos_token, eos_token, ... (strings or AddedToken
  // objects with "content").
  static ChatTemplate from_source(const std::string& source, const nlohmann::json& special_tokens,
                                  std::string origin = "chat template");
  static ChatTemplate built_in(ChatFormat format);

  // Throws Error on a conversation the template cannot render (its raise_exception too).
  std::string render(const ChatInput& input) const;
  // Where the template came from, for the log ("tokenizer_config.json", "built-in Kimi K2").
  const std::string& origin() const { return origin_; }
  bool is_built_in() const { return templates_.empty(); }
  // The Jinja source (every named template's, joined); empty for a built-in format.
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string render_jinja(const ChatInput& input) const;

  std::map<std::string, std::shared_ptr<const jinja::Template>> templates_;  // by name
  bool content_as_parts_ = false;  // the template iterates over a message's content parts
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  ChatFormat format_ = ChatFormat::DeepseekV3;
  std::string origin_, source_;
};

}  // namespace mlaserve
