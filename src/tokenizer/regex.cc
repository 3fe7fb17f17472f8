#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "base/error.h"

namespace mlaserve {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern) : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                  &error_code, &error_offset, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof message);
    fail("invalid tokenizer regex at offset {}: {} (pattern: {})", error_offset, reinterpret_cast<const char*>(message),
         pattern);
  }
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  size_t offset = 0;
  uint32_t options = 0;  // the first call checks the subject's UTF-8 once; later calls skip it
  while (offset <= text.size()) {
    const int rc = pcre2_match(compiled_->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), offset, options,
                               data, nullptr);
    options = PCRE2_NO_UTF_CHECK;
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH (input is valid UTF-8, so no other error)
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // empty match: step over one code point
      offset = end + 1;
      while (offset < text.size() && (uint8_t(text[offset]) & 0xc0) == 0x80) ++offset;
      continue;
    }
    matches.emplace_back(begin, end);
    offset = end;
  }
  pcre2_match_data_free(data);
  return matches;
}

namespace {

// Index one past the ']' closing the class that opens at pattern[open] == '['.
size_t class_end(const std::string& pattern, size_t open) {
  size_t i = open + 1;
  if (i < pattern.size() && pattern[i] == '^') ++i;
  if (i < pattern.size() && pattern[i] == ']') ++i;  // a leading ']' is literal
  int depth = 1;
  for (; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      ++i;
    } else if (pattern[i] == '[') {
      ++depth;
    } else if (pattern[i] == ']' && --depth == 0) {
      return i + 1;
    }
  }
  fail("tokenizer regex: unterminated character class at offset {}", open);
}

// "&&" at nesting depth 1 of the class body [open+1, close-1), or npos.
size_t top_level_intersection(const std::string& pattern, size_t open, size_t close) {
  int depth = 0;
  for (size_t i = open + 1; i + 1 < close - 1; ++i) {
    if (pattern[i] == '\\') {
      ++i;
    } else if (pattern[i] == '[') {
      ++depth;
    } else if (pattern[i] == ']') {
      --depth;
    } else if (depth == 0 && pattern[i] == '&' && pattern[i + 1] == '&') {
      return i;
    }
  }
  return std::string::npos;
}

}  // namespace

std::string rewrite_class_intersections(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern[i] == '\\') {
      out.append(pattern, i, 2);
      i += 2;
      continue;
    }
    if (pattern[i] != '[') {
      out.push_back(pattern[i++]);
      continue;
    }
    const size_t close = class_end(pattern, i);
    const size_t split = top_level_intersection(pattern, i, close);
    if (split == std::string::npos) {
      out.append(pattern, i, close - i);
    } else {
      const std::string left = pattern.substr(i + 1, split - i - 1);
      std::string right = pattern.substr(split + 2, close - 1 - split - 2);  // "[^B]" or "[B]"
      MLA_CHECK(right.size() >= 2 && right.front() == '[' && right.back() == ']',
                "tokenizer regex: unsupported class intersection '{}'", pattern.substr(i, close - i));
      const bool negated = right[1] == '^';
      const std::string inner = right.substr(negated ? 2 : 1, right.size() - (negated ? 3 : 2));
      out += (negated ? "(?:(?![" : "(?:(?=[") + inner + "])[" + left + "])";
    }
    i = close;
  }
  return out;
}

std::string sanitize_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const uint8_t lead = uint8_t(text[i]);
    size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    uint32_t code = length == 1 ? lead : length == 2 ? lead & 0x1f : length == 3 ? lead & 0x0f : lead & 0x07;
    for (size_t k = 1; valid && k < length; ++k) {
      const uint8_t next = uint8_t(text[i + k]);
      valid = (next & 0xc0) == 0x80;
      code = (code << 6) | (next & 0x3f);
    }
    // Reject overlong forms, surrogates and code points past U+10FFFF.
    if (valid && length > 1) {
      static const uint32_t kMinimum[5] = {0, 0, 0x80, 0x800, 0x10000};
      valid = code >= kMinimum[length] && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff);
    }
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += "\xef\xbf\xbd";
      ++i;
    }
  }
  return out;
}

}  // namespace mlaserve
