// What the string methods, the filters and the % operator share: Python's str operations and
// the reading of a call's arguments. Errors are Errors without a line, as in builtins.h.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace mlaserve::jinja {

// str.strip, lstrip, rstrip: whitespace, or (given) any of `chars`' characters.
std::string strip(const std::string& text, bool left, bool right, const Value* chars = nullptr);
// str.upper and str.lower of ASCII letters; other characters unchanged.
std::string ascii_case(std::string text, bool upper);
std::string capitalize(const std::string& text);
// str.center (align '^'), ljust ('<'), rjust ('>') to `width` characters.
std::string pad(const std::string& text, int64_t width, const std::string& fill, char align);
// `format % values`: a tuple gives one value a conversion, a dict names them.
std::string printf_format(const std::string& format, const Value& values);
// dict|dictsort(case_sensitive, by, reverse): (key, value) pairs.
Value dictsort(const Value& object, const Arguments& args);
// Charges the budget for a sort of n items.
void charge_sort(size_t n);

// Positional argument `index`, else keyword `name`: its value if given and not none, else `fallback`.
int64_t int_argument(const Arguments& args, size_t index, std::string_view name, int64_t fallback);
bool bool_argument(const Arguments& args, size_t index, std::string_view name, bool fallback);
// The same argument, which `method` must be given.
const Value& argument(const Arguments& args, size_t index, std::string_view name, std::string_view method);

}  // namespace mlaserve::jinja
