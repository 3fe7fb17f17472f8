// Unicode regular expressions for pre-tokenization, on PCRE2 (UTF + UCP, JIT when available).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlaserve {

class Regex {
 public:
  explicit Regex(const std::string& pattern);  // throws Error with PCRE2's message and offset
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // [begin, end) byte ranges of successive non-overlapping matches in valid UTF-8 `text`.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

// PCRE2 has no character-class intersection. Rewrites each class [A&&[^B]] as (?:(?![B])[A])
// and [A&&[B]] as (?:(?=[B])[A]) (Kimi's pattern uses [\p{Lu}...&&[^\p{Han}]]).
std::string rewrite_class_intersections(const std::string& pattern);

// Replaces invalid UTF-8 sequences with U+FFFD (as Python's errors="replace").
std::string sanitize_utf8(std::string_view text);

}  // namespace mlaserve
