// The chat template a checkpoint ships (chat_template.jinja, or tokenizer_config.json's
// chat_template), rendered with src/jinja as transformers' apply_chat_template renders it; for a
// checkpoint that ships none, the built-in format its tokens name: DeepSeek-V3, Kimi K2, or Kimi
// K3's XTML (kimi_k3_chat.h), which renders to segments rather than one string.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace mlaserve {

class Tokenizer;
namespace jinja {
class Template;
}

enum class ChatFormat { DeepseekV3, KimiK2, KimiK3 };

// A piece of a rendered prompt. allow_special: its text may spell special tokens, which become
// their ids (a Jinja render, one of K3's markers); otherwise it is encoded as ordinary text, so
// that what a user typed can never become structure (K3's message text, tag names, attributes).
// Segments are encoded one at a time, never joined first, as K3's encoder does.
struct PromptSegment {
  std::string text;
  bool allow_special = false;
};

// The segments' token ids: each encoded on its own.
std::vector<int32_t> encode_segments(const std::vector<PromptSegment>& segments, const Tokenizer& tokenizer);

// A request field a format cannot take (K3's thinking_effort 'medium'): the field is named.
struct ChatInputError : Error {
  ChatInputError(std::string field_name, const std::string& message) : Error(message), field(std::move(field_name)) {}
  std::string field;
};

// A conversation as the template renders it, in OpenAI's message shape: role, content (a
// string, null, or a list of {"type": "text", "text"} parts), tool_calls, tool_call_id, ...
struct ChatInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null, or the tool definitions
  nlohmann::ordered_json documents;  // null, or documents for retrieval templates
  nlohmann::ordered_json kwargs;     // null, or extra template variables (chat_template_kwargs)
  // What the request asks of the output, for formats that state it in the prompt (Kimi K3):
  // tool_choice and response_format as the request sent them (null when absent), and
  // reasoning_effort (empty when absent).
  nlohmann::ordered_json tool_choice, response_format;
  std::string reasoning_effort;
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
                           const std::string& override_path = "", bool kimi_k3_open_channel = true);
  // special_tokens: tokenizer_config.json's bos_token, eos_token, ... (strings or AddedToken
  // objects with "content").
  static ChatTemplate from_source(const std::string& source, const nlohmann::json& special_tokens,
                                  std::string origin = "chat template");
  // kimi_k3_open_channel: K3's generation prompt also opens the think or response channel (as
  // the checkpoint's encoding_k3.py does); false leaves that to the model (Moonshot's API).
  static ChatTemplate built_in(ChatFormat format, bool kimi_k3_open_channel = true);

  // Throws Error on a conversation the template cannot render (its raise_exception too).
  std::vector<PromptSegment> render_segments(const ChatInput& input) const;
  // The segments' text joined: what a log or a test reads (not what the model is fed).
  std::string render(const ChatInput& input) const;
  // The prompt's token ids: each segment encoded on its own.
  std::vector<int32_t> encode(const ChatInput& input, const Tokenizer& tokenizer) const;
  // Where the template came from, for the log ("tokenizer_config.json", "built-in Kimi K2").
  const std::string& origin() const { return origin_; }
  bool is_built_in() const { return templates_.empty(); }
  ChatFormat format() const { return format_; }  // of a built-in format
  // The Jinja source (every named template's, joined); empty for a built-in format.
  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string render_jinja(const ChatInput& input) const;
  std::string render_built_in(const ChatInput& input) const;

  std::map<std::string, std::shared_ptr<const jinja::Template>> templates_;  // by name
  bool content_as_parts_ = false;  // the template iterates over a message's content parts
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
  ChatFormat format_ = ChatFormat::DeepseekV3;
  bool kimi_k3_open_channel_ = true;
  std::string origin_, source_;
};

}  // namespace mlaserve
