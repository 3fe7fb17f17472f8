// ASCII character classes as the lexer and the string methods (strip, split, title) use them.
#pragma once

namespace mlaserve::jinja {

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
inline bool is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace mlaserve::jinja
