// JSON Schema's `pattern` (an ECMAScript regular expression) and `format` as grammar rules for a
// JSON string's contents. The pattern is matched whole, as if anchored (^ and $ may be written):
// a string matching it whole matches it anywhere, so the output is always valid. Supported:
// literals, escapes (\d \w \s and their negations, \. \/ \\ \t \n \r \f \v \uXXXX \xXX and other
// escaped punctuation), classes [a-z_] and [^...], ., groups (...), (?:...) and (?<name>...),
// alternation, quantifiers ? * + {n} {n,} {n,m} (lazy forms taken as greedy). Characters are
// written JSON-escaped where JSON needs it. Lookarounds, backreferences and \b are an Error naming
// them. minLength/maxLength together with a pattern bound its repetitions.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.h"

namespace mlaserve::grammar {

struct LengthBounds {
  int min = 0, max = -1;  // max -1: none
};

// The rule of the string contents the pattern matches whole. Throws Error naming what it cannot
// write (and `where`).
int32_t pattern_rule(GrammarBuilder& builder, const std::string& where, std::string_view pattern,
                     LengthBounds length = {});

// The pattern strings of `format` are written by: date-time (UTC, "Z"), date, time, duration,
// email, uuid, ipv4, ipv6, uri, hostname; nullopt for another format (an annotation then).
std::optional<std::string> format_pattern(std::string_view format);

}  // namespace mlaserve::grammar
