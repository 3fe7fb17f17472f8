// ASCII character classes as the lexer, the string methods and the filters use them.
#pragma once

namespace mlaserve::jinja {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
inline bool is_lower(char c) { return c >= 'a' && c <= 'z'; }
inline bool is_alpha(char c) { return is_upper(c) || is_lower(c); }
inline char to_upper(char c) { return is_lower(c) ? char(c - 'a' + 'A') : c; }
inline char to_lower(char c) { return is_upper(c) ? char(c - 'A' + 'a') : c; }
inline bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace mlaserve::jinja
