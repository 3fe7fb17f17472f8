#include "grammar/pattern.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "base/error.h"

namespace mlaserve::grammar {
namespace {

using B = GrammarBuilder;
constexpr int kMaxRepeat = 4096;  // as the JSON grammar bounds minLength, maxItems, ...

// A set of characters: ASCII ones, whether every non-ASCII one is in, and single non-ASCII ones
// (their UTF-8 bytes).
struct CharSet {
  ByteSet ascii;
  bool non_ascii = false;
  std::vector<std::string> extra;
};

// The parsed pattern: character sets, single non-ASCII characters, sequences, alternatives and
// repetitions (max -1: unbounded).
struct Node {
  enum class Kind { Chars, Sequence, Alternatives, Repeat } kind = Kind::Sequence;
  CharSet chars;
  std::vector<Node> children;
  int min = 0, max = -1;
};

Node chars_node(CharSet set) {
  Node node;
  node.kind = Node::Kind::Chars;
  node.chars = std::move(set);
  return node;
}

CharSet ascii_of(std::string_view bytes) {
  CharSet set;
  for (char c : bytes) set.ascii.set(uint8_t(c));
  return set;
}

CharSet ascii_range(char low, char high) {
  CharSet set;
  for (int c = low; c <= high; ++c) set.ascii.set(size_t(c));
  return set;
}

CharSet united(CharSet a, const CharSet& b) {
  a.ascii |= b.ascii;
  a.non_ascii = a.non_ascii || b.non_ascii;
  a.extra.insert(a.extra.end(), b.extra.begin(), b.extra.end());
  return a;
}

// Every character but these ASCII ones (\D, \W, \S, [^...], .).
CharSet complement(const CharSet& set) {
  CharSet out;
  for (int c = 0; c < 0x80; ++c) out.ascii.set(size_t(c), !set.ascii[size_t(c)]);
  out.non_ascii = true;
  return out;
}

const CharSet kDigits = ascii_range('0', '9');
const CharSet kWord = united(united(ascii_range('a', 'z'), ascii_range('A', 'Z')), united(kDigits, ascii_of("_")));
const CharSet kSpace = ascii_of(" \t\n\r\f\v");

std::string utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out += char(code_point);
  } else if (code_point < 0x800) {
    out += char(0xc0 | (code_point >> 6)), out += char(0x80 | (code_point & 0x3f));
  } else if (code_point < 0x10000) {
    out += char(0xe0 | (code_point >> 12)), out += char(0x80 | ((code_point >> 6) & 0x3f)),
        out += char(0x80 | (code_point & 0x3f));
  } else {
    out += char(0xf0 | (code_point >> 18)), out += char(0x80 | ((code_point >> 12) & 0x3f));
    out += char(0x80 | ((code_point >> 6) & 0x3f)), out += char(0x80 | (code_point & 0x3f));
  }
  return out;
}

CharSet one_char(const std::string& bytes) {
  if (bytes.size() == 1 && uint8_t(bytes[0]) < 0x80) return ascii_of(bytes);
  CharSet set;
  set.extra.push_back(bytes);
  return set;
}

class PatternParser {
 public:
  PatternParser(std::string_view pattern, const std::string& where) : pattern_(pattern), where_(where) {}

  Node parse() {
    Node node = alternatives();
    if (at_ < pattern_.size()) fail("unbalanced ')'");
    return node;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    mlaserve::fail("JSON schema at {}: pattern '{}': {} (at character {})", where_, pattern_, what, at_);
  }
  bool done() const { return at_ >= pattern_.size(); }
  char peek() const { return done() ? '\0' : pattern_[at_]; }
  bool take(std::string_view text) {
    if (pattern_.substr(at_).substr(0, text.size()) != text) return false;
    at_ += text.size();
    return true;
  }

  Node alternatives() {
    Node node;
    node.kind = Node::Kind::Alternatives;
    node.children.push_back(sequence());
    while (take("|")) node.children.push_back(sequence());
    return node.children.size() == 1 ? std::move(node.children[0]) : node;
  }

  Node sequence() {
    Node node;
    while (!done() && peek() != '|' && peek() != ')') node.children.push_back(quantified(atom()));
    return node;
  }

  // A decimal count of a quantifier, or nullopt when the text there is not one.
  std::optional<int> count() {
    const size_t start = at_;
    while (!done() && peek() >= '0' && peek() <= '9') ++at_;
    if (at_ == start) return std::nullopt;
    return std::stoi(std::string(pattern_.substr(start, std::min<size_t>(at_ - start, 6))));
  }

  Node quantified(Node atom) {
    int min = 1, max = 1;
    const size_t start = at_;
    if (take("*"))
      min = 0, max = -1;
    else if (take("+"))
      min = 1, max = -1;
    else if (take("?"))
      min = 0, max = 1;
    else if (take("{")) {
      const auto low = count();
      std::optional<int> high = low;
      if (low && take(",")) high = peek() == '}' ? std::optional<int>(-1) : count();
      if (!low || !high || !take("}")) {  // not a quantifier: "{" is a literal (as browsers read it)
        at_ = start;
        return atom;
      }
      min = *low, max = *high;
      if (max >= 0 && max < min) fail("a quantifier {n,m} with m < n");
    } else {
      return atom;
    }
    take("?");  // lazy: the same strings
    if (min > kMaxRepeat) fail(fmt::format("a repetition of more than {}", kMaxRepeat));
    Node node;
    node.kind = Node::Kind::Repeat;
    node.min = min;
    node.max = max < 0 ? -1 : std::min(max, kMaxRepeat);
    node.children.push_back(std::move(atom));
    return node;
  }

  Node atom() {
    const char c = peek();
    if (c == '(') return group();
    if (c == '[') return chars_node(char_class());
    if (c == '.') return ++at_, chars_node(complement(ascii_of("\n\r")));
    if (c == '^' || c == '$') return ++at_, Node{};  // matched whole: anchors add nothing
    if (c == '\\') return ++at_, chars_node(escape(false));
    if (c == '*' || c == '+' || c == '?') fail("nothing to repeat");
    return chars_node(one_char(next_char()));
  }

  Node group() {
    ++at_;
    if (take("?=") || take("?!") || take("?<=") || take("?<!")) fail("lookarounds are not supported");
    if (take("?<")) {  // a named group, matched as any group
      const size_t end = pattern_.find('>', at_);
      if (end == std::string_view::npos) fail("an unterminated group name");
      at_ = end + 1;
    } else if (!take("?:") && peek() == '?') {
      fail("an unsupported group construct");
    }
    Node inner = alternatives();
    if (!take(")")) fail("an unterminated group");
    return inner;
  }

  // One character of the pattern as its UTF-8 bytes.
  std::string next_char() {
    const uint8_t lead = uint8_t(peek());
    const size_t length = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    std::string bytes(pattern_.substr(at_, length));
    at_ += length;
    return bytes;
  }

  uint32_t hex(size_t digits) {
    uint32_t value = 0;
    for (size_t i = 0; i < digits; ++i, ++at_) {
      const char c = peek();
      const int digit = c >= '0' && c <= '9'   ? c - '0'
                        : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                               : -1;
      if (digit < 0) fail("a malformed \\u or \\x escape");
      value = value * 16 + uint32_t(digit);
    }
    return value;
  }

  // After a backslash: a class escape or one character.
  CharSet escape(bool in_class) {
    if (done()) fail("a trailing backslash");
    const char c = pattern_[at_++];
    switch (c) {
      case 'd': return kDigits;
      case 'D': return complement(kDigits);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 'n': return ascii_of("\n");
      case 't': return ascii_of("\t");
      case 'r': return ascii_of("\r");
      case 'f': return ascii_of("\f");
      case 'v': return ascii_of("\v");
      case '0': return ascii_of(std::string(1, '\0'));
      case 'x': return one_char(utf8(hex(2)));
      case 'u': {
        const uint32_t code_point = hex(4);
        if (code_point >= 0xd800 && code_point < 0xe000) fail("a surrogate \\u escape");
        return one_char(utf8(code_point));
      }
      case 'b':
        if (in_class) return ascii_of("\b");
        fail("word boundaries (\\b) are not supported");
      case 'B': fail("word boundaries (\\B) are not supported");
      case 'k': fail("backreferences are not supported");
      case 'p':
      case 'P': fail("Unicode property classes are not supported");
      default:
        if (c >= '1' && c <= '9') fail("backreferences are not supported");
        return one_char(std::string(1, c));
    }
  }

  CharSet char_class() {
    ++at_;
    const bool negated = take("^");
    CharSet set;
    while (!done() && peek() != ']') {
      CharSet item = peek() == '\\' ? (++at_, escape(true)) : one_char(next_char());
      if (peek() == '-' && at_ + 1 < pattern_.size() && pattern_[at_ + 1] != ']') {
        ++at_;
        const CharSet end = peek() == '\\' ? (++at_, escape(true)) : one_char(next_char());
        if (item.ascii.count() != 1 || end.ascii.count() != 1 || !item.extra.empty() || !end.extra.empty())
          fail("a class range of non-ASCII characters or of classes");
        char low = 0, high = 0;
        for (int b = 0; b < 0x80; ++b) {
          if (item.ascii[size_t(b)]) low = char(b);
          if (end.ascii[size_t(b)]) high = char(b);
        }
        if (low > high) fail("a class range out of order");
        item = ascii_range(low, high);
      }
      set = united(set, item);
    }
    if (!take("]")) fail("an unterminated class");
    if (negated && !set.extra.empty()) fail("a negated class with non-ASCII characters");
    return negated ? complement(set) : set;
  }

  std::string_view pattern_;
  std::string where_;
  size_t at_ = 0;
};

// Shortest and longest string a node matches (-1: no longest).
int min_length(const Node& node) {
  switch (node.kind) {
    case Node::Kind::Chars: return 1;
    case Node::Kind::Repeat: return node.min * min_length(node.children[0]);
    case Node::Kind::Alternatives: {
      int best = -1;
      for (const Node& child : node.children) best = best < 0 ? min_length(child) : std::min(best, min_length(child));
      return std::max(best, 0);
    }
    default: {
      int total = 0;
      for (const Node& child : node.children) total += min_length(child);
      return total;
    }
  }
}

int max_length(const Node& node) {
  switch (node.kind) {
    case Node::Kind::Chars: return 1;
    case Node::Kind::Repeat: {
      const int each = max_length(node.children[0]);
      return node.max < 0 || each < 0 ? (each == 0 ? 0 : -1) : node.max * each;
    }
    default: {
      int total = 0;
      for (const Node& child : node.children) {
        const int length = max_length(child);
        if (length < 0) return -1;
        total = node.kind == Node::Kind::Alternatives ? std::max(total, length) : total + length;
      }
      return total;
    }
  }
}

// Unbounded repetitions bounded to `cap` (at least their minimum).
void cap_repeats(Node& node, int cap) {
  if (node.kind == Node::Kind::Repeat && node.max < 0) node.max = std::max(node.min, cap);
  for (Node& child : node.children) cap_repeats(child, cap);
}

// minLength/maxLength as bounds on the pattern's repetitions: the longest cap on its unbounded
// ones that keeps it within maxLength, and a top-level repetition lengthened to reach minLength.
void bound_length(Node& node, LengthBounds length, const std::string& where) {
  if (length.max >= 0 && (max_length(node) < 0 || max_length(node) > length.max)) {
    int cap = length.max;
    for (; cap >= 0; --cap) {
      Node capped = node;
      cap_repeats(capped, cap);
      if (max_length(capped) >= 0 && max_length(capped) <= length.max) break;
    }
    if (cap < 0) fail("JSON schema at {}: the pattern cannot be written in maxLength {} characters", where, length.max);
    cap_repeats(node, cap);
  }
  const int missing = length.min - min_length(node);
  if (missing <= 0) return;
  std::vector<Node*> candidates = {&node};
  if (node.kind == Node::Kind::Sequence)
    for (Node& child : node.children) candidates.push_back(&child);
  for (Node* repeat : candidates) {
    Node& child = *repeat;
    if (child.kind != Node::Kind::Repeat || min_length(child.children[0]) != 1) continue;
    if (child.max >= 0 && child.max < child.min + missing) continue;
    child.min += missing;
    if (length.max < 0 || max_length(node) <= length.max) return;
    child.min -= missing;
  }
  fail("JSON schema at {}: the pattern's shortest string has {} characters, fewer than minLength {}", where,
       min_length(node), length.min);
}

// A set's characters as a JSON string writes them: plain, escaped (", \, control characters) or
// as multi-byte UTF-8.
std::vector<Sequence> json_written(const CharSet& set) {
  std::vector<Sequence> options;
  ByteSet plain;
  for (int c = 0x20; c < 0x80; ++c)
    if (set.ascii[size_t(c)] && c != '"' && c != '\\') plain.set(size_t(c));
  if (plain.any()) options.push_back({Item{plain, -1}});
  if (set.ascii['"']) options.push_back(B::literal("\\\""));
  if (set.ascii['\\']) options.push_back(B::literal("\\\\"));
  static const std::map<int, const char*> short_escapes = {
      {'\b', "\\b"}, {'\f', "\\f"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}};
  for (int c = 0; c < 0x20; ++c) {
    if (!set.ascii[size_t(c)]) continue;
    const auto found = short_escapes.find(c);
    options.push_back(
        B::literal(found != short_escapes.end() ? std::string(found->second) : fmt::format("\\u{:04x}", c)));
  }
  if (set.non_ascii) {
    const std::vector<Sequence> multi_byte = B::utf8_character(ByteSet());
    options.insert(options.end(), multi_byte.begin() + 1, multi_byte.end());
  }
  for (const std::string& bytes : set.extra) options.push_back(B::literal(bytes));
  return options;
}

int32_t emit(GrammarBuilder& builder, const Node& node, const std::string& name) {
  switch (node.kind) {
    case Node::Kind::Chars: return builder.rule(name + " chars", json_written(node.chars));
    case Node::Kind::Repeat: {
      const Node& child = node.children[0];
      if (min_length(child) == 0 && node.max != node.min)
        fail("JSON schema at {}: a repetition of something that can be empty", name);
      return builder.repeat(name + " repeat", {B::ref(emit(builder, child, name))}, node.min, node.max);
    }
    case Node::Kind::Alternatives: {
      std::vector<Sequence> options;
      for (const Node& child : node.children) options.push_back({B::ref(emit(builder, child, name))});
      return builder.rule(name + " alternatives", std::move(options));
    }
    default: {
      Sequence sequence;
      for (const Node& child : node.children) sequence.push_back(B::ref(emit(builder, child, name)));
      return builder.rule(name + " sequence", {sequence});
    }
  }
}

}  // namespace

int32_t pattern_rule(GrammarBuilder& builder, const std::string& where, std::string_view pattern, LengthBounds length) {
  Node node = PatternParser(pattern, where).parse();
  bound_length(node, length, where);
  return emit(builder, node, where + " pattern");
}

// Strings of each format, as the published validators take them (zod's, Pydantic's, JSON
// Schema's): a date-time in UTC with "Z" (zod's default refuses offsets), an email of plain
// ASCII labels, a UUID of versions 1-8 with the RFC 4122 variant, and the rest in their usual
// forms, with bounded lengths.
std::optional<std::string> format_pattern(std::string_view format) {
  static const std::string date = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])";
  static const std::string time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?";
  static const std::string byte = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  static const std::string label = "[a-z0-9]{1,20}";
  static const std::map<std::string_view, std::string> patterns = {
      {"date-time", date + "T" + time + "Z"},
      {"date", date},
      {"time", time},
      {"duration", "P([0-9]{1,4}D)?T[0-9]{1,4}H([0-9]{1,4}M)?([0-9]{1,4}S)?|P[0-9]{1,4}D"},
      {"email", label + "(\\." + label + "){0,2}@" + label + "(\\." + label + "){0,2}\\.[a-z]{2,6}"},
      {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"},
      {"ipv4", byte + "(\\." + byte + "){3}"},
      {"ipv6", "([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}"},
      {"uri", "https?://" + label + "(\\." + label + "){0,2}\\.[a-z]{2,6}(/[A-Za-z0-9._~-]{1,20}){0,4}"},
      {"hostname", label + "(\\." + label + "){0,3}"},
  };
  const auto found = patterns.find(format);
  return found == patterns.end() ? std::nullopt : std::optional(found->second);
}

}  // namespace mlaserve::grammar
