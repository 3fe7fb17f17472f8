#include "server/chat_output.h"

#include "base/error.h"
#include "server/kimi_k3_output.h"
#include "tokenizer/text_streamer.h"

namespace mlaserve {
namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

std::string trimmed(std::string_view text) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1));
}

// The earliest of `markers` in `text` (the longer at the same position): {position, length}.
std::pair<size_t, size_t> find_first(std::string_view text, const std::vector<std::string>& markers) {
  std::pair<size_t, size_t> best = {std::string_view::npos, 0};
  for (const auto& marker : markers) {
    const size_t at = text.find(marker);
    if (at < best.first || (at == best.first && at != std::string_view::npos && marker.size() > best.second))
      best = {at, marker.size()};
  }
  return best;
}

// Kimi K2 names a call functions.NAME:IDX, and that header is its id.
std::string kimi_function_name(const std::string& header) {
  std::string name = header.starts_with("functions.") ? header.substr(10) : header;
  const size_t colon = name.rfind(':');
  if (colon != std::string::npos && colon + 1 < name.size() &&
      name.find_first_not_of("0123456789", colon + 1) == std::string::npos)
    name.erase(colon);
  return name;
}

}  // namespace

void ChatDelta::append(const ChatDelta& later) {
  reasoning += later.reasoning;
  content += later.content;
  for (const auto& call : later.tool_calls) {
    const bool continues = !tool_calls.empty() && tool_calls.back().index == call.index && call.name.empty();
    if (continues)
      tool_calls.back().arguments += call.arguments;
    else
      tool_calls.push_back(call);
  }
}

// Where a format's calls sit: a section of calls, each a header of fields (the last one the
// function's name) and then the arguments.
struct ToolCallParser::Markup {
  std::vector<std::string> section_begin, section_end;
  std::string call_begin;
  std::vector<std::string> header_ends;  // one per header field
  std::vector<std::string> arguments_end;
  bool header_is_id = false;
};

namespace {

const std::string kDeepseekCallEnd = "<｜tool▁call▁end｜>";

const std::vector<std::pair<ToolCallFormat, const char*>> kFormatNames = {{ToolCallFormat::DeepseekV3, "deepseek_v3"},
                                                                          {ToolCallFormat::DeepseekV31, "deepseek_v31"},
                                                                          {ToolCallFormat::KimiK2, "kimi_k2"},
                                                                          {ToolCallFormat::KimiK3, "kimi_k3"}};

}  // namespace

ToolCallFormat tool_call_format_from_name(std::string_view name) {
  for (const auto& [format, format_name] : kFormatNames)
    if (name == format_name) return format;
  fail("unknown tool-call parser '{}' (deepseek_v3, deepseek_v31, kimi_k2, kimi_k3)", name);
}

const char* tool_call_format_name(ToolCallFormat format) {
  for (const auto& [known, name] : kFormatNames)
    if (known == format) return name;
  return "";
}

std::optional<ToolCallFormat> tool_call_format_of_template(std::string_view source) {
  if (source.find("<|tool_call_begin|>") != std::string_view::npos) return ToolCallFormat::KimiK2;
  if (source.find("<｜tool▁call▁begin｜>") == std::string_view::npos) return std::nullopt;
  return source.find("```json") != std::string_view::npos ? ToolCallFormat::DeepseekV3 : ToolCallFormat::DeepseekV31;
}

ChatParsing chat_parsing(std::string_view tool_parser, std::string_view reasoning_parser,
                         std::string_view template_source, bool kimi_k3_format) {
  ChatParsing parsing;
  if (tool_parser == "auto")
    parsing.tools = kimi_k3_format ? ToolCallFormat::KimiK3 : tool_call_format_of_template(template_source);
  else if (tool_parser != "none")
    parsing.tools = tool_call_format_from_name(tool_parser);
  if (reasoning_parser == "auto") {
    parsing.reasoning = kimi_k3_format || template_source.find(kThinkClose) != std::string_view::npos;
  } else {
    MLA_CHECK(reasoning_parser == "none" || reasoning_parser == "deepseek_r1" || reasoning_parser == "deepseek_v3" ||
                  reasoning_parser == "kimi_k2" || reasoning_parser == "kimi_k3",
              "unknown reasoning parser '{}' (auto, none, deepseek_r1, deepseek_v3, kimi_k2, kimi_k3)",
              reasoning_parser);
    parsing.reasoning = reasoning_parser != "none";
  }
  parsing.kimi_k3 = parsing.tools == ToolCallFormat::KimiK3 || reasoning_parser == "kimi_k3" ||
                    (kimi_k3_format && reasoning_parser == "auto");
  return parsing;
}

const ToolCallParser::Markup& ToolCallParser::markup_of(ToolCallFormat format) {
  static const Markup deepseek_v3 = {{"<｜tool▁calls▁begin｜>"},
                                     {"<｜tool▁calls▁end｜>"},
                                     "<｜tool▁call▁begin｜>",
                                     {"<｜tool▁sep｜>", "\n```json\n"},
                                     {"\n```" + kDeepseekCallEnd, kDeepseekCallEnd},
                                     false};
  static const Markup deepseek_v31 = {{"<｜tool▁calls▁begin｜>"}, {"<｜tool▁calls▁end｜>"}, "<｜tool▁call▁begin｜>",
                                      {"<｜tool▁sep｜>"},         {kDeepseekCallEnd},       false};
  static const Markup kimi_k2 = {{"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"},
                                 {"<|tool_calls_section_end|>", "<|tool_call_section_end|>"},
                                 "<|tool_call_begin|>",
                                 {"<|tool_call_argument_begin|>"},
                                 {"<|tool_call_end|>"},
                                 true};
  return format == ToolCallFormat::KimiK2 ? kimi_k2 : format == ToolCallFormat::DeepseekV3 ? deepseek_v3 : deepseek_v31;
}

ToolCallParser::ToolCallParser(ToolCallFormat format) : markup_(markup_of(format)) {}
ToolCallParser::~ToolCallParser() = default;

ChatDelta ToolCallParser::feed(std::string_view text) {
  buffer_ += text;
  ChatDelta out;
  while (step(out)) {
  }
  return out;
}

bool ToolCallParser::step(ChatDelta& out) {
  switch (state_) {
    case State::Content: {
      const auto [at, length] = find_first(buffer_, markup_.section_begin);
      if (at == std::string::npos) {
        const size_t ready = buffer_.size() - partial_match_length(buffer_, markup_.section_begin);
        out.content += buffer_.substr(0, ready);
        buffer_.erase(0, ready);
        return false;
      }
      out.content += buffer_.substr(0, at);
      buffer_.erase(0, at + length);
      state_ = State::Section;
      return true;
    }
    case State::Section: {  // between calls: anything but a call or the section's end is dropped
      const auto [end_at, end_length] = find_first(buffer_, markup_.section_end);
      const size_t call_at = buffer_.find(markup_.call_begin);
      if (end_at == std::string::npos && call_at == std::string::npos) {
        std::vector<std::string> markers = markup_.section_end;
        markers.push_back(markup_.call_begin);
        buffer_.erase(0, buffer_.size() - partial_match_length(buffer_, markers));
        return false;
      }
      const bool ends = end_at < call_at;
      buffer_.erase(0, ends ? end_at + end_length : call_at + markup_.call_begin.size());
      state_ = ends ? State::Content : State::Header;
      header_field_ = 0;
      return true;
    }
    case State::Header: {
      const std::string& end = markup_.header_ends[header_field_];
      const size_t at = buffer_.find(end);
      if (at == std::string::npos) return false;
      header_ = trimmed(std::string_view(buffer_).substr(0, at));
      buffer_.erase(0, at + end.size());
      if (++header_field_ < markup_.header_ends.size()) return true;
      const std::string name = markup_.header_is_id ? kimi_function_name(header_) : header_;
      out.tool_calls.push_back({calls_, markup_.header_is_id ? header_ : "", name, ""});
      state_ = State::Arguments;
      return true;
    }
    case State::Arguments: {
      const auto [at, length] = find_first(buffer_, markup_.arguments_end);
      const size_t ready =
          at != std::string::npos ? at : buffer_.size() - partial_match_length(buffer_, markup_.arguments_end);
      if (ready > 0) out.append({"", "", {{calls_, "", "", buffer_.substr(0, ready)}}});
      buffer_.erase(0, at != std::string::npos ? at + length : ready);
      if (at == std::string::npos) return false;
      ++calls_;
      state_ = State::Section;
      return true;
    }
  }
  return false;
}

ChatDelta ToolCallParser::finish() {
  ChatDelta out;
  if (state_ == State::Content || state_ == State::Header) out.content = std::move(buffer_);
  if (state_ == State::Arguments && !buffer_.empty()) out.tool_calls.push_back({calls_, "", "", std::move(buffer_)});
  buffer_.clear();
  state_ = State::Content;
  return out;
}

ReasoningParser::ReasoningParser(bool opened_in_prompt) : state_(opened_in_prompt ? State::Reasoning : State::Start) {}

ChatDelta ReasoningParser::feed(std::string_view text) {
  buffer_ += text;
  ChatDelta out;
  if (state_ == State::Start) {
    if (buffer_.size() < kThinkOpen.size() && kThinkOpen.starts_with(buffer_)) return out;
    const bool opens = buffer_.starts_with(kThinkOpen);
    if (opens) buffer_.erase(0, kThinkOpen.size());
    state_ = opens ? State::Reasoning : State::Content;
  }
  if (state_ == State::Reasoning) {
    const size_t at = buffer_.find(kThinkClose);
    if (at == std::string::npos) {
      const size_t ready = buffer_.size() - partial_match_length(buffer_, {std::string(kThinkClose)});
      out.reasoning = buffer_.substr(0, ready);
      buffer_.erase(0, ready);
      return out;
    }
    out.reasoning = buffer_.substr(0, at);
    buffer_.erase(0, at + kThinkClose.size());
    state_ = State::Content;
  }
  out.content = std::move(buffer_);
  buffer_.clear();
  return out;
}

ChatDelta ReasoningParser::finish() {
  ChatDelta out;
  (state_ == State::Reasoning ? out.reasoning : out.content) = std::move(buffer_);
  buffer_.clear();
  return out;
}

bool think_opened_in_prompt(std::string_view prompt_text) {
  const size_t end = prompt_text.find_last_not_of(" \t\r\n");
  return end != std::string_view::npos && prompt_text.substr(0, end + 1).ends_with(kThinkOpen);
}

ChatOutputParser::ChatOutputParser(const ChatParsing& parsing, std::string_view prompt_text) {
  if (parsing.kimi_k3) {
    kimi_k3_ =
        std::make_unique<KimiK3OutputParser>(kimi_k3_opened(prompt_text), parsing.reasoning, parsing.tools.has_value());
    return;
  }
  if (parsing.reasoning) reasoning_.emplace(think_opened_in_prompt(prompt_text));
  if (parsing.tools) tools_ = std::make_unique<ToolCallParser>(*parsing.tools);
}

ChatOutputParser::ChatOutputParser(ChatOutputParser&&) noexcept = default;
ChatOutputParser::~ChatOutputParser() = default;

ChatDelta ChatOutputParser::tools_on_content(ChatDelta delta) {
  if (!tools_) return delta;
  ChatDelta out = tools_->feed(delta.content);
  out.reasoning = std::move(delta.reasoning);
  return out;
}

ChatDelta ChatOutputParser::feed(std::string_view text) {
  if (kimi_k3_) return kimi_k3_->feed(text);
  ChatDelta delta;
  if (reasoning_)
    delta = reasoning_->feed(text);
  else
    delta.content = text;
  return tools_on_content(std::move(delta));
}

ChatDelta ChatOutputParser::finish() {
  if (kimi_k3_) return kimi_k3_->finish();
  ChatDelta out = tools_on_content(reasoning_ ? reasoning_->finish() : ChatDelta{});
  if (tools_) out.append(tools_->finish());
  return out;
}

}  // namespace mlaserve
