#include "server/kimi_k3_output.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/text_streamer.h"

namespace mlaserve {
namespace {

using namespace kimi_k3;

std::string xtml_tag(std::string_view open_or_close, std::string_view name) {
  return std::string(open_or_close) + std::string(name) + std::string(kSep);
}

const std::string kK3ThinkOpen = xtml_tag(kOpen, "think"), kK3ThinkClose = xtml_tag(kClose, "think");
const std::string kK3ResponseOpen = xtml_tag(kOpen, "response"), kK3ResponseClose = xtml_tag(kClose, "response");
const std::string kK3ToolsOpen = xtml_tag(kOpen, "tools"), kK3MessageClose = xtml_tag(kClose, "message");
const std::string kK3ArgumentClose = xtml_tag(kClose, "argument"), kK3JsonClose = xtml_tag(kClose, "json"),
                  kK3CallClose = xtml_tag(kClose, "call");
const std::string kK3End(kEndOfMessage);

// A JSON string's contents: the text escaped byte by byte, so pieces escape to the whole's.
std::string json_escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (uint8_t(c) < 0x20)
          out += fmt::format("\\u{:04x}", int(c));
        else
          out += c;
    }
  }
  return out;
}

// key="value" attributes, values unescaped (&quot; then &amp;, the reverse of the encoder).
std::string attribute(std::string_view header, std::string_view key) {
  const std::string needle = " " + std::string(key) + "=\"";
  const size_t at = header.find(needle);
  if (at == std::string_view::npos) return "";
  const size_t begin = at + needle.size(), end = header.find('"', begin);
  std::string value(header.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
  for (const auto& [escaped, plain] : {std::pair<std::string, std::string>{"&quot;", "\""}, {"&amp;", "&"}})
    for (size_t found = value.find(escaped); found != std::string::npos;
         found = value.find(escaped, found + plain.size()))
      value.replace(found, escaped.size(), plain);
  return value;
}

// The earliest of `markers` in `text`: {position, index into markers}; npos when none.
std::pair<size_t, size_t> earliest(std::string_view text, const std::vector<std::string>& markers) {
  std::pair<size_t, size_t> best = {std::string_view::npos, 0};
  for (size_t i = 0; i < markers.size(); ++i) {
    const size_t at = text.find(markers[i]);
    if (at < best.first) best = {at, i};
  }
  return best;
}

}  // namespace

KimiK3OutputParser::KimiK3OutputParser(KimiK3Opened opened, bool parse_reasoning, bool parse_calls)
    : state_(opened == KimiK3Opened::Think      ? State::Think
             : opened == KimiK3Opened::Response ? State::Response
                                                : State::Message),
      parse_reasoning_(parse_reasoning),
      parse_calls_(parse_calls) {}

ChatDelta KimiK3OutputParser::feed(std::string_view text) {
  buffer_ += text;
  ChatDelta out;
  while (step(out)) {
  }
  return out;
}

bool KimiK3OutputParser::step(ChatDelta& out) {
  if (buffer_.empty()) return false;
  switch (state_) {
    case State::Think:
    case State::Response:
    case State::Argument:
    case State::Json: return text_channel(out);
    case State::Done: buffer_.clear(); return false;
    default: return structure(out);
  }
}

void KimiK3OutputParser::emit_text(std::string_view text, ChatDelta& out) {
  if (text.empty()) return;
  switch (state_) {
    case State::Think: (parse_reasoning_ ? out.reasoning : out.content) += text; break;
    case State::Response:
    case State::Message: out.content += text; break;
    case State::Argument:
      if (argument_type_ == "string")
        emit_arguments(json_escaped(text), out);
      else
        argument_value_ += text;
      break;
    case State::Json:
      if (raw_arguments_) emit_arguments(std::string(text), out);
      break;
    default: break;
  }
}

void KimiK3OutputParser::emit_arguments(std::string text, ChatDelta& out) {
  if (parse_calls_ && !text.empty()) out.append({"", "", {{calls_ - 1, "", "", std::move(text)}}});
}

// Think, response, a string argument's value or a json block: text up to the marker that ends
// it; a suffix that may begin one is held.
bool KimiK3OutputParser::text_channel(ChatDelta& out) {
  if (fresh_ && (state_ == State::Think || state_ == State::Response)) {
    const std::string& own = state_ == State::Think ? kK3ThinkOpen : kK3ResponseOpen;
    if (buffer_.size() < own.size() && own.starts_with(buffer_)) return false;
    if (buffer_.starts_with(own)) buffer_.erase(0, own.size());
  }
  fresh_ = false;
  static const std::vector<std::string> think = {kK3ThinkClose, kK3ResponseOpen, kK3ToolsOpen, kK3MessageClose, kK3End};
  static const std::vector<std::string> response = {kK3ResponseClose, kK3ToolsOpen, kK3MessageClose, kK3End};
  static const std::vector<std::string> argument = {kK3ArgumentClose, kK3CallClose};
  static const std::vector<std::string> json_block = {kK3JsonClose, kK3CallClose};
  const std::vector<std::string>& exits = state_ == State::Think      ? think
                                          : state_ == State::Response ? response
                                          : state_ == State::Argument ? argument
                                                                      : json_block;
  const auto [at, which] = earliest(buffer_, exits);
  const size_t ready = at != std::string::npos ? at : buffer_.size() - partial_match_length(buffer_, exits);
  emit_text(std::string_view(buffer_).substr(0, ready), out);
  buffer_.erase(0, ready);
  if (at == std::string::npos) return false;
  const std::string& marker = exits[which];
  buffer_.erase(0, marker.size());
  if (state_ == State::Argument || state_ == State::Json) {
    if (state_ == State::Argument) end_argument(out);
    state_ = State::Call;
    if (marker == kK3CallClose) end_call(out);
  } else if (marker == kK3ToolsOpen) {
    state_ = State::Tools;
  } else if (marker == kK3ResponseOpen) {
    state_ = State::Response;
  } else {
    state_ = marker == kK3MessageClose || marker == kK3End ? State::Done : State::Message;
  }
  return true;
}

// Between channels, calls or arguments: the next whole tag (<|open|>NAME attrs<|sep|>,
// <|close|>NAME<|sep|>, <|end_of_msg|>). Text between them is content in the message and
// dropped inside the tools block.
bool KimiK3OutputParser::structure(ChatDelta& out) {
  static const std::vector<std::string> starts = {std::string(kOpen), std::string(kClose), kK3End};
  const auto [at, which] = earliest(buffer_, starts);
  const size_t ready = at != std::string::npos ? at : buffer_.size() - partial_match_length(buffer_, starts);
  emit_text(std::string_view(buffer_).substr(0, ready), out);
  buffer_.erase(0, ready);
  if (at == std::string::npos) return false;
  if (starts[which] == kK3End) {
    state_ = State::Done;
    return true;
  }
  const size_t sep = buffer_.find(kSep);
  if (sep == std::string::npos) return false;
  const bool opens = which == 0;
  const std::string header = buffer_.substr(starts[which].size(), sep - starts[which].size());
  buffer_.erase(0, sep + kSep.size());
  on_tag(header, opens, out);
  return true;
}

void KimiK3OutputParser::on_tag(std::string_view header, bool opens, ChatDelta& out) {
  const std::string_view name = header.substr(0, header.find(' '));
  fresh_ = true;
  if (state_ == State::Message) {
    if (!opens && name == "message") state_ = State::Done;
    if (opens && name == "think") state_ = State::Think;
    if (opens && name == "response") state_ = State::Response;
    if (opens && name == "tools") state_ = State::Tools;
    fresh_ = false;  // the channel's own opening was this tag
  } else if (state_ == State::Tools) {
    if (!opens && (name == "tools" || name == "message")) state_ = name == "tools" ? State::Message : State::Done;
    if (opens && name == "call") {
      if (parse_calls_) out.tool_calls.push_back({calls_, "", attribute(header, "tool"), ""});
      ++calls_;
      arguments_ = 0;
      raw_arguments_ = false;
      state_ = State::Call;
    }
  } else if (state_ == State::Call) {
    if (!opens && (name == "call" || name == "tools")) {  // a call the model left open ends with its block
      end_call(out);
      state_ = name == "call" ? State::Tools : State::Message;
    }
    if (opens && name == "argument") {
      argument_type_ = attribute(header, "type");
      argument_value_.clear();
      if (!raw_arguments_)
        emit_arguments((arguments_++ == 0 ? "{" : ", ") +
                           nlohmann::json(attribute(header, "key"))
                               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                           (argument_type_ == "string" ? ": \"" : ": "),
                       out);
      state_ = State::Argument;
    }
    if (opens && name == "json") {
      raw_arguments_ = arguments_ == 0;
      state_ = State::Json;
    }
  }
}

// A typed value: JSON as written, or (not JSON) the text as a string.
void KimiK3OutputParser::end_argument(ChatDelta& out) {
  if (raw_arguments_) return;
  if (argument_type_ == "string") return emit_arguments("\"", out);
  const size_t first = argument_value_.find_first_not_of(" \t\r\n");
  const std::string value =
      first == std::string::npos
          ? ""
          : argument_value_.substr(first, argument_value_.find_last_not_of(" \t\r\n") - first + 1);
  const bool is_json = !nlohmann::json::parse(value, nullptr, false).is_discarded();
  emit_arguments(is_json ? value : "\"" + json_escaped(argument_value_) + "\"", out);
}

void KimiK3OutputParser::end_call(ChatDelta& out) {
  if (!raw_arguments_) emit_arguments(arguments_ == 0 ? "{}" : "}", out);
}

ChatDelta KimiK3OutputParser::finish() {
  ChatDelta out;
  if (state_ == State::Think || state_ == State::Response || state_ == State::Message ||
      (state_ == State::Argument && argument_type_ == "string") || state_ == State::Json)
    emit_text(buffer_, out);
  buffer_.clear();
  state_ = State::Done;
  return out;
}

}  // namespace mlaserve
