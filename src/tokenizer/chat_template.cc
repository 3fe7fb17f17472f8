#include "tokenizer/chat_template.h"

#include <filesystem>

#include "base/error.h"
#include "base/mmap_file.h"
#include "io/gguf.h"
#include "jinja/template.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/kimi_k3_chat.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace mlaserve {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;

struct Turn {
  std::string role, content;
};

// A message's content as one string: text parts joined by newlines (as vLLM flattens them for
// templates that expect a string).
std::string content_text(const ojson& content, size_t index) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  MLA_CHECK(content.is_array(), "messages[{}].content must be a string, null or a list of parts", index);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    MLA_CHECK(part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string(),
              "messages[{}].content[{}] is not a text part", index, i);
    if (i > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

// The messages as the template receives them: checked, and with content flattened to a string
// unless the template iterates over parts itself.
ojson prepared_messages(const ojson& messages, bool content_as_parts) {
  MLA_CHECK(messages.is_array() && !messages.empty(), "'messages' must be a non-empty list");
  ojson out = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    ojson message = messages[i];
    MLA_CHECK(message.is_object() && message.contains("role") && message["role"].is_string(),
              "messages[{}] needs a string 'role'", i);
    if (message.contains("content") && !(content_as_parts && message["content"].is_array()))
      message["content"] = message["content"].is_null() ? ojson() : ojson(content_text(message["content"], i));
    out.push_back(std::move(message));
  }
  return out;
}

// DeepSeek-V3's tokenizer_config.json chat_template for system/user/assistant: BOS, every
// system message joined by blank lines, then <｜User｜>content and
// <｜Assistant｜>content<｜end▁of▁sentence｜> turns.
std::string deepseek_v3(const std::vector<Turn>& turns, bool add_generation_prompt) {
  std::string system_prompt;
  bool first_system = true;
  for (const auto& turn : turns) {
    if (turn.role != "system") continue;
    if (!first_system) system_prompt += "\n\n";
    system_prompt += turn.content;
    first_system = false;
  }
  std::string out = "<｜begin▁of▁sentence｜>" + system_prompt;
  for (const auto& turn : turns) {
    if (turn.role == "user")
      out += "<｜User｜>" + turn.content;
    else if (turn.role == "assistant")
      out += "<｜Assistant｜>" + turn.content + "<｜end▁of▁sentence｜>";
  }
  if (add_generation_prompt) out += "<｜Assistant｜>";
  return out;
}

// Kimi K2's chat_template.jinja for system/user/assistant: a default system turn when the first
// message is not one, then <|im_ROLE|>ROLE<|im_middle|>content<|im_end|> per message.
std::string kimi_k2(const std::vector<Turn>& turns, bool add_generation_prompt) {
  std::string out;
  if (turns[0].role != "system") out += "<|im_system|>system<|im_middle|>You are a helpful assistant<|im_end|>";
  for (const auto& turn : turns) {
    const std::string role_token = turn.role == "system" ? "<|im_system|>"
                                   : turn.role == "user" ? "<|im_user|>"
                                                         : "<|im_assistant|>";
    out += role_token + turn.role + "<|im_middle|>" + turn.content + "<|im_end|>";
  }
  if (add_generation_prompt) out += "<|im_assistant|>assistant<|im_middle|>";
  return out;
}

// The rendered text cut just after the final message's content, so that generation continues
// it (transformers' continue_final_message).
std::string cut_after_final_message(const std::string& rendered, const ojson& final_message) {
  const std::string content = content_text(final_message.value("content", ojson()), 0);
  const size_t first = content.find_first_not_of(" \t\n\r");
  const size_t last = content.find_last_not_of(" \t\n\r");
  const std::string stripped = first == std::string::npos ? "" : content.substr(first, last - first + 1);
  const size_t at = stripped.empty() ? std::string::npos : rendered.rfind(stripped);
  MLA_CHECK(at != std::string::npos, "continue_final_message: the final message does not appear in the rendered chat");
  const bool kept_spacing = rendered.compare(at, content.size(), content) == 0;
  return rendered.substr(0, at + (kept_spacing ? content.size() : stripped.size()));
}

// The special tokens transformers passes to every template (its special_tokens_map).
ojson special_token_variables(const nlohmann::json& tokenizer_config) {
  ojson out = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto found = tokenizer_config.find(key);
    if (found == tokenizer_config.end()) continue;
    if (found->is_string()) out[key] = found->get<std::string>();
    if (found->is_object() && found->contains("content") && (*found)["content"].is_string())
      out[key] = (*found)["content"].get<std::string>();
  }
  return out;
}

// Whether the template loops over a message's content (`for part in message['content']`): it
// then receives content parts as they are, otherwise their text joined.
bool iterates_over_content(const std::string& source) {
  static const Regex loop(R"(for\s+\w+\s+in\s+\w+\s*(?:\.\s*content\b|\[\s*['"]content['"]\s*\]))");
  return !loop.find_all(sanitize_utf8(source)).empty();
}

std::shared_ptr<const jinja::Template> parse(const std::string& source, const std::string& origin) {
  try {
    return std::make_shared<const jinja::Template>(source);
  } catch (const Error& e) {
    fail("{}: {}", origin, e.what());
  }
}

bool has_kimi_k3_markers(const Tokenizer& tokenizer) {
  for (std::string_view marker : {kimi_k3::kOpen, kimi_k3::kClose, kimi_k3::kSep, kimi_k3::kEndOfMessage})
    if (!tokenizer.token_id(marker) || tokenizer.encode(marker).size() != 1) return false;
  return true;
}

// The format whose tokens the tokenizer has (K3's markers, <|im_user|> or <｜User｜>).
ChatFormat chat_format_of(const Tokenizer& tokenizer) {
  if (has_kimi_k3_markers(tokenizer)) return ChatFormat::KimiK3;
  if (tokenizer.token_id("<|im_user|>")) return ChatFormat::KimiK2;
  if (tokenizer.token_id("<｜User｜>")) return ChatFormat::DeepseekV3;
  fail(
      "the tokenizer has neither Kimi K3 (<|open|>, <|close|>, <|sep|>, <|end_of_msg|>), Kimi K2 (<|im_user|>) "
      "nor DeepSeek-V3 (<｜User｜>) chat tokens, and the checkpoint ships no chat template");
}

const char* format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::KimiK3: return "built-in Kimi K3 XTML format";
    case ChatFormat::KimiK2: return "built-in Kimi K2 format";
    default: return "built-in DeepSeek-V3 format";
  }
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, const nlohmann::json& special_tokens,
                                       std::string origin) {
  ChatTemplate chat;
  chat.templates_["default"] = parse(source, origin);
  chat.content_as_parts_ = iterates_over_content(source);
  chat.source_ = source;
  chat.special_tokens_ = special_token_variables(special_tokens);
  chat.origin_ = std::move(origin);
  return chat;
}

ChatTemplate ChatTemplate::built_in(ChatFormat format, bool kimi_k3_open_channel) {
  ChatTemplate chat;
  chat.format_ = format;
  chat.kimi_k3_open_channel_ = kimi_k3_open_channel;
  chat.origin_ = format_name(format);
  if (format == ChatFormat::KimiK3 && !kimi_k3_open_channel) chat.origin_ += " (the model opens its channel)";
  return chat;
}

ChatTemplate ChatTemplate::load(const std::string& model_dir, const Tokenizer& tokenizer,
                                const std::string& override_path, bool kimi_k3_open_channel) {
  const fs::path dir(model_dir);
  nlohmann::json config = nlohmann::json::object();
  if (is_gguf_path(model_dir)) {
    config = gguf_tokenizer_files(model_dir).config;
    if (!override_path.empty()) return from_source(read_text_file(override_path), config, override_path);
    const auto found = config.find("chat_template");
    if (found == config.end()) return built_in(chat_format_of(tokenizer), kimi_k3_open_channel);
    return from_source(found->get<std::string>(), config, "'" + model_dir + "' tokenizer.chat_template");
  }
  if (fs::exists(dir / "tokenizer_config.json")) {
    try {
      config = nlohmann::json::parse(read_text_file((dir / "tokenizer_config.json").string()));
    } catch (const nlohmann::json::exception& e) {
      fail("'{}/tokenizer_config.json': not valid JSON: {}", model_dir, e.what());
    }
  }
  if (!override_path.empty()) return from_source(read_text_file(override_path), config, override_path);
  if (fs::exists(dir / "chat_template.jinja"))
    return from_source(read_text_file((dir / "chat_template.jinja").string()), config,
                       (dir / "chat_template.jinja").string());
  const std::string origin = (dir / "tokenizer_config.json").string() + " chat_template";
  const auto found = config.find("chat_template");
  if (found == config.end() || found->is_null()) return built_in(chat_format_of(tokenizer), kimi_k3_open_channel);
  if (found->is_string()) return from_source(found->get<std::string>(), config, origin);
  MLA_CHECK(found->is_array(), "{} must be a string or a list of {{name, template}}", origin);
  ChatTemplate chat;
  for (const auto& named : *found) {
    MLA_CHECK(named.is_object() && named.contains("name") && named["name"].is_string() && named.contains("template") &&
                  named["template"].is_string(),
              "{} must be a string or a list of {{name, template}}", origin);
    const std::string source = named["template"].get<std::string>();
    chat.templates_[named["name"].get<std::string>()] =
        parse(source, origin + " '" + named["name"].get<std::string>() + "'");
    chat.content_as_parts_ = chat.content_as_parts_ || iterates_over_content(source);
    chat.source_ += source;
  }
  MLA_CHECK(chat.templates_.contains("default"), "{} has no template named 'default'", origin);
  chat.special_tokens_ = special_token_variables(config);
  chat.origin_ = origin;
  return chat;
}

std::string ChatTemplate::render_jinja(const ChatInput& input) const {
  const bool has_tools = input.tools.is_array() && !input.tools.empty();
  const auto& chosen =
      has_tools && templates_.contains("tool_use") ? templates_.at("tool_use") : templates_.at("default");
  jinja::Object variables;
  for (const auto& [name, value] : special_tokens_.items()) variables.set(name, jinja::from_json(value));
  variables.set("messages", jinja::from_json(prepared_messages(input.messages, content_as_parts_)));
  if (!input.tools.is_null()) variables.set("tools", jinja::from_json(input.tools));
  if (!input.documents.is_null()) variables.set("documents", jinja::from_json(input.documents));
  variables.set("add_generation_prompt", input.add_generation_prompt && !input.continue_final_message);
  if (input.kwargs.is_object()) {
    for (const auto& [name, value] : input.kwargs.items()) {
      MLA_CHECK(name != "messages" && name != "tools" && name != "documents" && name != "add_generation_prompt",
                "chat_template_kwargs may not set '{}' (a request field of its own)", name);
      variables.set(name, jinja::from_json(value));
    }
  }
  return chosen->render(variables);
}

std::string ChatTemplate::render_built_in(const ChatInput& input) const {
  MLA_CHECK(input.tools.is_null() || input.tools.empty(),
            "this checkpoint ships no chat template, and the {} renders no tools (serve it with --chat-template)",
            origin_);
  const ojson messages = prepared_messages(input.messages, false);
  std::vector<Turn> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string role = messages[i]["role"].get<std::string>();
    MLA_CHECK(role == "system" || role == "user" || role == "assistant",
              "messages[{}]: role '{}' is not supported by the {} (system, user, assistant)", i, role, origin_);
    turns.push_back({role, content_text(messages[i].value("content", ojson()), i)});
  }
  const bool prompt = input.add_generation_prompt && !input.continue_final_message;
  return format_ == ChatFormat::KimiK2 ? kimi_k2(turns, prompt) : deepseek_v3(turns, prompt);
}

std::vector<PromptSegment> ChatTemplate::render_segments(const ChatInput& input) const {
  MLA_CHECK(!(input.add_generation_prompt && input.continue_final_message),
            "add_generation_prompt and continue_final_message cannot both be true");
  if (templates_.empty() && format_ == ChatFormat::KimiK3) return render_kimi_k3(input, kimi_k3_open_channel_);
  const std::string rendered = templates_.empty() ? render_built_in(input) : render_jinja(input);
  return {{input.continue_final_message ? cut_after_final_message(rendered, input.messages.back()) : rendered, true}};
}

std::string ChatTemplate::render(const ChatInput& input) const {
  std::string text;
  for (const PromptSegment& segment : render_segments(input)) text += segment.text;
  return text;
}

std::vector<int32_t> encode_segments(const std::vector<PromptSegment>& segments, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (const PromptSegment& segment : segments) {
    const std::vector<int32_t> encoded = tokenizer.encode(segment.text, segment.allow_special);
    ids.insert(ids.end(), encoded.begin(), encoded.end());
  }
  return ids;
}

std::vector<int32_t> ChatTemplate::encode(const ChatInput& input, const Tokenizer& tokenizer) const {
  return encode_segments(render_segments(input), tokenizer);
}

}  // namespace mlaserve
