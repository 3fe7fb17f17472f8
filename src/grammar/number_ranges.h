// JSON numbers within bounds, as grammar rules: JSON Schema's minimum, maximum, exclusiveMinimum
// and exclusiveMaximum. Integers are exact: every integer in the range, of at most 16 digits, and
// nothing else (digit by digit, as regular expressions for numeric ranges are built). Numbers
// with a fraction are a subset that is always valid: the integers in range, any fraction on an
// integer part strictly inside it (d.ddd lies between d and d + 1), and, when the range holds no
// whole unit, fractions of a fixed length between its bounds' fractions.
#pragma once
#include <optional>
#include <string>

#include "grammar/grammar.h"

namespace mlaserve::grammar {

struct NumberBounds {
  std::optional<double> low, high;  // none: unbounded on that side
  bool low_exclusive = false, high_exclusive = false;
};

// Throws Error (naming `name`) when no number lies in the bounds.
int32_t integer_in_range(GrammarBuilder& builder, const std::string& name, const NumberBounds& bounds);
int32_t number_in_range(GrammarBuilder& builder, const std::string& name, const NumberBounds& bounds);

}  // namespace mlaserve::grammar
