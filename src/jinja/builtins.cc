#include "jinja/builtins.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <set>
#include <string_view>

#include "base/error.h"
#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/chars.h"

namespace mlaserve::jinja {
namespace {

using ValueKind = Value::Kind;

std::string strip(const std::string& text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  while (left && begin < end && is_space(text[begin])) ++begin;
  while (right && end > begin && is_space(text[end - 1])) --end;
  return text.substr(begin, end - begin);
}

std::string ascii_case(std::string text, bool upper) {
  for (char& c : text) c = char(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The reference's title: a word character after a non-word one (or at the start) goes upper
// case; the rest stays as it is.
std::string title_case(std::string text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (is_word(text[i]) && (i == 0 || !is_word(text[i - 1]))) text[i] = char(std::toupper(static_cast<unsigned char>(text[i])));
  return text;
}

// A sort of n items: about n log2 n comparisons.
void charge_sort(size_t n) { charge_steps(n * size_t(std::bit_width(n))); }

// text.find(pattern, from) in time linear in the text: glibc's memmem (the two-way algorithm),
// since std::string's find may compare the whole pattern at every offset (32 MiB of 'a'
// searched for 16 MiB of 'a' and a 'b').
size_t find_text(std::string_view text, std::string_view pattern, size_t from) {
  if (from > text.size()) return std::string_view::npos;
  const void* found = memmem(text.data() + from, text.size() - from, pattern.data(), pattern.size());
  return found ? size_t(static_cast<const char*>(found) - text.data()) : std::string_view::npos;
}

std::string replace_all(const std::string& text, const std::string& from, const std::string& to, int64_t count) {
  if (count == 0) return text;
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  if (from.empty()) {  // an empty pattern matches between every two characters
    for (const std::string& character : utf8_characters(text)) {
      if (count < 0 || done < count) out += to, ++done;
      out += character;
      check_string_size(out.size());
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  while (count < 0 || done < count) {
    const size_t found = find_text(text, from, pos);
    if (found == std::string::npos) break;
    out += text.substr(pos, found - pos) + to;
    check_string_size(out.size());
    pos = found + from.size();
    ++done;
  }
  return out + text.substr(pos);
}

// str.split(sep=None, maxsplit=-1) as Python: no separator splits on runs of whitespace.
Value split(const std::string& text, const Value* separator, int64_t max_split) {
  Array parts;
  if (!separator || separator->is_none()) {
    size_t pos = 0;
    while (true) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
      if (pos >= text.size()) break;
      if (max_split >= 0 && int64_t(parts.size()) >= max_split) {
        parts.emplace_back(text.substr(pos));
        break;
      }
      size_t end = pos;
      while (end < text.size() && !is_space(text[end])) ++end;
      check_list_size(parts.size() + 1);
      parts.emplace_back(text.substr(pos, end - pos));
      pos = end;
    }
    return Value::array(std::move(parts));
  }
  MLA_CHECK(separator->is_string(), "split's separator must be a string");
  const std::string& sep = separator->as_string();
  MLA_CHECK(!sep.empty(), "split: empty separator");
  size_t pos = 0;
  while (max_split < 0 || int64_t(parts.size()) < max_split) {
    const size_t found = find_text(text, sep, pos);
    if (found == std::string::npos) break;
    check_list_size(parts.size() + 2);  // this part and the last
    parts.emplace_back(text.substr(pos, found - pos));
    pos = found + sep.size();
  }
  parts.emplace_back(text.substr(pos));
  return Value::array(std::move(parts));
}

bool matches_prefix_or_suffix(const std::string& text, const Value& pattern, bool prefix) {
  const auto check = [&](const Value& p) {
    MLA_CHECK(p.is_string(), "{} takes a string or a tuple of strings", prefix ? "startswith" : "endswith");
    const std::string& s = p.as_string();
    return s.size() <= text.size() && (prefix ? text.compare(0, s.size(), s) == 0
                                              : text.compare(text.size() - s.size(), s.size(), s) == 0);
  };
  if (!pattern.is_array()) return check(pattern);
  return std::any_of(pattern.items().begin(), pattern.items().end(), check);
}

int64_t int_argument(const Arguments& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* value = args.get(index, name);
  if (!value || value->is_none()) return fallback;
  MLA_CHECK(value->kind() == ValueKind::Int, "'{}' must be an integer, got {}", name, value->type_name());
  return value->as_int();
}

bool bool_argument(const Arguments& args, size_t index, std::string_view name, bool fallback) {
  const Value* value = args.get(index, name);
  if (!value || value->is_none()) return fallback;
  MLA_CHECK(value->kind() == ValueKind::Bool, "'{}' must be a boolean, got {}", name, value->type_name());
  return value->as_bool();
}

const Value& argument(const Arguments& args, size_t index, std::string_view name, std::string_view method) {
  const Value* value = args.get(index, name);
  MLA_CHECK(value != nullptr, "{} needs its argument '{}'", method, name);
  return *value;
}

Value string_method(const std::string& text, const std::string& name) {
  const auto bind = [&](auto fn) { return Value::function([text, fn](const Arguments& args) { return fn(text, args); }); };
  if (name == "upper") return bind([](const std::string& s, const Arguments&) { return Value(ascii_case(s, true)); });
  if (name == "lower") return bind([](const std::string& s, const Arguments&) { return Value(ascii_case(s, false)); });
  if (name == "strip") return bind([](const std::string& s, const Arguments&) { return Value(strip(s, true, true)); });
  if (name == "lstrip") return bind([](const std::string& s, const Arguments&) { return Value(strip(s, true, false)); });
  if (name == "rstrip") return bind([](const std::string& s, const Arguments&) { return Value(strip(s, false, true)); });
  if (name == "title") return bind([](const std::string& s, const Arguments&) { return Value(title_case(s)); });
  if (name == "capitalize")
    return bind([](const std::string& s, const Arguments&) {
      return Value(s.empty() ? s : ascii_case(s.substr(0, 1), true) + s.substr(1));
    });
  if (name == "startswith" || name == "endswith") {
    const bool prefix = name == "startswith";
    return bind([prefix](const std::string& s, const Arguments& args) {
      return Value(matches_prefix_or_suffix(s, argument(args, 0, "prefix", prefix ? "startswith" : "endswith"), prefix));
    });
  }
  if (name == "split")
    return bind([](const std::string& s, const Arguments& args) {
      return split(s, args.get(0, "sep"), int_argument(args, 1, "maxsplit", -1));
    });
  if (name == "replace")
    return bind([](const std::string& s, const Arguments& args) {
      const Value& from = argument(args, 0, "old", "replace");
      const Value& to = argument(args, 1, "new", "replace");
      MLA_CHECK(from.is_string() && to.is_string(), "replace takes strings");
      return Value(replace_all(s, from.as_string(), to.as_string(), int_argument(args, 2, "count", -1)));
    });
  if (name == "find")
    return bind([](const std::string& s, const Arguments& args) {
      const Value& needle = argument(args, 0, "sub", "find");
      MLA_CHECK(needle.is_string(), "find takes a string");
      const size_t found = find_text(s, needle.as_string(), 0);
      return Value(found == std::string::npos ? int64_t(-1) : int64_t(utf8_length(s.substr(0, found))));
    });
  if (name == "length") return Value(int64_t(utf8_length(text)));
  return Value();
}

Value dictsort(const Value& object, const Arguments& args) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* by = args.get(1, "by");
  const bool by_value = by && by->is_string() && by->as_string() == "value";
  MLA_CHECK(!by || (by->is_string() && (by->as_string() == "key" || by_value)), "dictsort's 'by' must be 'key' or 'value'");
  const bool reverse = bool_argument(args, 2, "reverse", false);
  Array pairs;
  for (const auto& [key, value] : object.attributes().entries) pairs.push_back(Value::array({Value(key), value}));
  charge_sort(pairs.size());
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const int order = compare(a.items()[by_value ? 1 : 0], b.items()[by_value ? 1 : 0], case_sensitive);
    return reverse ? order > 0 : order < 0;
  });
  return Value::array(std::move(pairs));
}

Value dict_method(const Value& object, const std::string& name) {
  const auto entries = [object](auto project) {
    Array out;
    for (const auto& entry : object.attributes().entries) out.push_back(project(entry));
    return Value::array(std::move(out));
  };
  if (name == "get")
    return Value::function([object](const Arguments& args) {
      const Value& key = argument(args, 0, "key", "get");
      MLA_CHECK(key.is_string(), "dict keys are strings, got {}", key.type_name());
      const Value* found = object.attributes().find(key.as_string());
      if (found) return *found;
      const Value* fallback = args.get(1, "default");
      return fallback ? *fallback : Value::none();
    });
  if (name == "items")
    return Value::function([entries](const Arguments&) {
      return entries([](const auto& e) { return Value::array({Value(e.first), e.second}); });
    });
  if (name == "keys")
    return Value::function([entries](const Arguments&) { return entries([](const auto& e) { return Value(e.first); }); });
  if (name == "values")
    return Value::function([entries](const Arguments&) { return entries([](const auto& e) { return e.second; }); });
  if (name == "dictsort") return Value::function([object](const Arguments& args) { return dictsort(object, args); });
  return Value();
}

Value list_method(const Value& list, const std::string& name) {
  if (name == "append")
    return Value::function([list](const Arguments& args) {
      Value item = argument(args, 0, "item", "append");
      MLA_CHECK(!item.reaches(list), "cannot append to a list a value holding that list");
      check_list_size(list.items().size() + 1);
      list.items().push_back(std::move(item));
      return Value::none();
    });
  if (name == "pop")
    return Value::function([list](const Arguments& args) {
      Array& items = list.items();
      int64_t index = int_argument(args, 0, "index", -1);
      if (index < 0) index += int64_t(items.size());
      MLA_CHECK(index >= 0 && index < int64_t(items.size()), "pop index out of range");
      Value item = items[size_t(index)];
      items.erase(items.begin() + index);
      return item;
    });
  if (name == "length") return Value(int64_t(list.items().size()));
  return Value();
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  if (object.has_attributes()) {
    if (const Value* found = object.attributes().find(name)) return *found;
    return object.is_object() ? dict_method(object, name) : Value();
  }
  if (object.is_string()) return string_method(object.as_string(), name);
  if (object.is_array()) {
    if (!name.empty() && std::all_of(name.begin(), name.end(), ::isdigit)) return get_item(object, std::stoll(name));
    return list_method(object, name);
  }
  return Value();
}

Value get_item(const Value& object, int64_t index) {
  if (object.is_array()) {
    const auto n = int64_t(object.items().size());
    if (index < 0) index += n;
    return index >= 0 && index < n ? object.items()[size_t(index)] : Value();
  }
  if (object.is_string()) {
    const std::string& text = object.as_string();
    const std::vector<size_t> offsets = utf8_offsets(text);
    const auto n = int64_t(offsets.size() - 1);
    if (index < 0) index += n;
    if (index < 0 || index >= n) return Value();
    return Value(text.substr(offsets[size_t(index)], offsets[size_t(index) + 1] - offsets[size_t(index)]));
  }
  MLA_CHECK(!object.has_attributes(), "dict keys are strings, not integers");
  return Value();
}

Value slice_value(const Value& object, const int64_t* start, const int64_t* stop, int64_t step) {
  MLA_CHECK(object.is_array() || object.is_string(), "cannot slice {}", object.type_name());
  MLA_CHECK(step != 0, "slice step cannot be zero");
  const std::vector<size_t> offsets = object.is_string() ? utf8_offsets(object.as_string()) : std::vector<size_t>();
  const auto n = int64_t(object.is_array() ? object.items().size() : offsets.size() - 1);
  const auto clamp = [&](const int64_t* bound, int64_t fallback, int64_t low, int64_t high) {
    if (!bound) return fallback;
    const int64_t b = *bound < 0 ? *bound + n : *bound;
    return std::clamp(b, low, high);
  };
  std::vector<size_t> picked;  // the indices the slice takes, in order
  // A step past the end jumps to the end, so that i + step cannot overflow.
  if (step > 0) {
    const int64_t end = clamp(stop, n, 0, n);
    for (int64_t i = clamp(start, 0, 0, n); i < end; i = end - i > step ? i + step : end) picked.push_back(size_t(i));
  } else {
    const int64_t end = clamp(stop, -1, -1, n - 1);
    for (int64_t i = clamp(start, n - 1, -1, n - 1); i > end; i = end - i < step ? i + step : end)
      picked.push_back(size_t(i));
  }
  if (object.is_array()) {
    Array out;
    for (size_t i : picked) out.push_back(object.items()[i]);
    return Value::array(std::move(out));
  }
  std::string text;
  for (size_t i : picked) text.append(object.as_string(), offsets[i], offsets[i + 1] - offsets[i]);
  return Value(std::move(text));
}

namespace {

bool contains(const Value& container, const Value& item) {
  if (container.is_array()) {
    charge_steps(container.items().size());
    return std::any_of(container.items().begin(), container.items().end(),
                       [&](const Value& v) { return loosely_equal(v, item); });
  }
  if (container.is_string() && item.is_string())
    return find_text(container.as_string(), item.as_string(), 0) != std::string::npos;
  if (container.has_attributes() && item.is_string()) return container.attributes().find(item.as_string()) != nullptr;
  fail("cannot test whether {} is in {}", item.type_name(), container.type_name());
}

// An integer result as Python gives it, or an error where int64 cannot hold it.
int64_t integer_result(double x) {
  MLA_CHECK(x >= -9223372036854775808.0 && x < 9223372036854775808.0, "integer result {} out of range", x);
  return int64_t(x);
}

int64_t integer_arithmetic(char op, int64_t a, int64_t b) {
  int64_t result = 0;
  const bool overflow = op == '+' ? __builtin_add_overflow(a, b, &result)
                        : op == '-' ? __builtin_sub_overflow(a, b, &result)
                                    : __builtin_mul_overflow(a, b, &result);
  MLA_CHECK(!overflow, "integer overflow in {} {} {}", a, op, b);
  return result;
}

Value arithmetic(const std::string& op, const Value& left, const Value& right) {
  const double a = left.as_number(), b = right.as_number();
  const bool as_float = left.kind() == ValueKind::Float || right.kind() == ValueKind::Float;
  const auto number = [&](double x) { return as_float ? Value(x) : Value(integer_result(x)); };
  if (op == "+" || op == "-" || op == "*")
    return as_float ? Value(op == "+" ? a + b : op == "-" ? a - b : a * b)
                    : Value(integer_arithmetic(op[0], left.as_int(), right.as_int()));
  MLA_CHECK(b != 0 || (op != "/" && op != "//" && op != "%"), "division by zero");  // as Python
  if (op == "/") return Value(a / b);
  if (op == "//") return number(std::floor(a / b));
  if (op == "%") {  // Python's: the remainder takes the divisor's sign
    if (as_float) {
      const double r = std::fmod(a, b);
      return Value(r != 0 && (r < 0) != (b < 0) ? r + b : r);
    }
    if (right.as_int() == -1) return Value(int64_t(0));  // INT64_MIN % -1 overflows in C++
    const int64_t r = left.as_int() % right.as_int();
    return Value(r != 0 && (r < 0) != (right.as_int() < 0) ? r + right.as_int() : r);
  }
  if (op == "**") return (as_float || b < 0) ? Value(std::pow(a, b)) : Value(integer_result(std::nearbyint(std::pow(a, b))));
  if (op == "<") return Value(a < b);
  if (op == ">") return Value(a > b);
  if (op == "<=") return Value(a <= b);
  if (op == ">=") return Value(a >= b);
  fail("unknown operator '{}'", op);
}

Value concatenate(const std::string& left, const std::string& right) {
  check_string_size(left.size() + right.size());
  return Value(left + right);
}

}  // namespace

Value binary_operation(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return Value(loosely_equal(left, right));
  if (op == "!=") return Value(!loosely_equal(left, right));
  if (op == "in") return right.is_undefined() ? Value(false) : Value(contains(right, left));
  if (op == "not in") return right.is_undefined() ? Value(true) : Value(!contains(right, left));
  if (op == "~") {
    MLA_CHECK(!left.is_none() && !right.is_none(), "cannot concatenate none with ~");
    return concatenate(left.str(), right.str());
  }
  if (left.is_number() && right.is_number()) return arithmetic(op, left, right);
  if (op == "**" && (left.is_number() || left.kind() == ValueKind::Bool) && (right.is_number() || right.kind() == ValueKind::Bool))
    return arithmetic(op, left, right);
  MLA_CHECK(!left.is_undefined() && !right.is_undefined(), "cannot apply {} to an undefined value", op);
  MLA_CHECK(!left.is_none() && !right.is_none(), "cannot apply {} to none", op);
  if (op == "+" && left.is_array() && right.is_array()) {
    check_list_size(left.items().size() + right.items().size());
    Array items = left.items();
    items.insert(items.end(), right.items().begin(), right.items().end());
    return Value::array(std::move(items));
  }
  if (op == "+" && (left.is_string() || right.is_string())) return concatenate(left.str(), right.str());
  if (left.is_string() && right.is_string() && (op == "<" || op == ">" || op == "<=" || op == ">=")) {
    const int order = left.as_string().compare(right.as_string());
    return Value(op == "<" ? order < 0 : op == ">" ? order > 0 : op == "<=" ? order <= 0 : order >= 0);
  }
  fail("unsupported operator '{}' between {} and {}", op, left.type_name(), right.type_name());
}

namespace {

Value to_json_filter(const Value& operand, const Arguments& args) {
  JsonFormat format;
  const int64_t indent = int_argument(args, 0, "indent", 0);
  MLA_CHECK(indent >= 0, "tojson's indent must not be negative, got {}", indent);
  check_string_size(size_t(indent));
  format.indent = int(indent);
  format.ensure_ascii = bool_argument(args, 99, "ensure_ascii", false);
  format.sort_keys = bool_argument(args, 99, "sort_keys", false);
  if (const Value* separators = args.keyword("separators"); separators && !separators->is_none()) {
    MLA_CHECK(separators->is_array() && separators->items().size() == 2 && separators->items()[0].is_string() &&
                  separators->items()[1].is_string(),
              "tojson's separators must be two strings");
    format.item_separator = separators->items()[0].as_string();
    format.key_separator = separators->items()[1].as_string();
  }
  return Value(to_json(operand, format));
}

Value sort_filter(const Value& operand, const Arguments& args) {
  MLA_CHECK(operand.is_array(), "sort needs a list, got {}", operand.type_name());
  const bool reverse = bool_argument(args, 0, "reverse", false);
  const bool case_sensitive = bool_argument(args, 1, "case_sensitive", false);
  const Value* attribute = args.get(2, "attribute");
  const auto key = [&](const Value& item) {
    if (!attribute || attribute->is_none()) return item;
    Value value = item;
    const std::string path = attribute->str();
    for (size_t start = 0; start <= path.size();) {
      const size_t dot = std::min(path.find('.', start), path.size());
      value = get_attribute(value, path.substr(start, dot - start));
      start = dot + 1;
    }
    return value;
  };
  Array items = operand.items();
  charge_sort(items.size());
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int order = compare(key(a), key(b), case_sensitive);
    return reverse ? order > 0 : order < 0;
  });
  return Value::array(std::move(items));
}

Value select_attribute(const Value& operand, const Arguments& args, bool select) {
  MLA_CHECK(operand.is_array(), "selectattr/rejectattr need a list, got {}", operand.type_name());
  const Value& attribute = argument(args, 0, "attribute", "selectattr");
  MLA_CHECK(attribute.is_string(), "selectattr's attribute must be a string");
  Array out;
  for (const Value& item : operand.items()) {
    MLA_CHECK(item.has_attributes(), "selectattr/rejectattr need a list of dicts");
    const Value value = get_attribute(item, attribute.as_string());
    bool result = false;
    if (args.positional.size() > 1) {
      Arguments test_args;
      test_args.positional.assign(args.positional.begin() + 2, args.positional.end());
      result = value.truthy() && run_test(args.positional[1].str(), value, test_args);
    } else {
      result = value.truthy();
    }
    if (result == select) out.push_back(item);
  }
  return Value::array(std::move(out));
}

Value map_filter(const Value& operand, const Arguments& args) {
  MLA_CHECK(operand.is_array(), "map needs a list, got {}", operand.type_name());
  const Value* attribute = args.keyword("attribute");
  MLA_CHECK(attribute && attribute->is_string(), "map is implemented with attribute= only");
  const Value* fallback = args.keyword("default");
  Array out;
  for (const Value& item : operand.items()) {
    MLA_CHECK(item.has_attributes(), "map(attribute=) needs a list of dicts");
    const Value value = get_attribute(item, attribute->as_string());
    out.push_back(value.is_undefined() && fallback ? *fallback : value);
  }
  return Value::array(std::move(out));
}

Value indent_filter(const Value& operand, const Arguments& args) {
  const Value* width = args.get(0, "width");
  const int64_t spaces = width && width->is_string() ? 0 : std::max<int64_t>(0, int_argument(args, 0, "width", 4));
  check_string_size(size_t(spaces));
  const std::string pad = width && width->is_string() ? width->as_string() : std::string(size_t(spaces), ' ');
  const bool first = bool_argument(args, 1, "first", false), blank = bool_argument(args, 2, "blank", false);
  std::string out;
  const std::string& text = operand.as_string();
  size_t start = 0;
  for (int line = 0; start <= text.size(); ++line) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string piece = text.substr(start, end - start);
    if (line > 0) out += '\n';
    out += ((line > 0 || first) && (blank || !piece.empty()) ? pad : "") + piece;
    check_string_size(out.size());
    start = end + 1;
  }
  return Value(std::move(out));
}

Value number_filter(const std::string& name, const Value& operand, const Arguments& args) {
  const bool to_int = name == "int";
  const Value* fallback = args.get(0, "default");
  if (operand.is_string()) {
    const std::string text = strip(operand.as_string(), true, false);
    char* end = nullptr;
    errno = 0;
    const long long integer = to_int ? std::strtoll(text.c_str(), &end, 10) : 0;
    const double parsed = to_int ? 0 : std::strtod(text.c_str(), &end);
    if (end == text.c_str()) return fallback ? *fallback : to_int ? Value(int64_t(0)) : Value(0.0);
    MLA_CHECK(!to_int || errno != ERANGE, "integer '{}' out of range", text);
    return to_int ? Value(int64_t(integer)) : Value(parsed);
  }
  MLA_CHECK(operand.is_number() || operand.kind() == ValueKind::Bool, "cannot apply {} to {}", name, operand.type_name());
  return to_int ? Value(integer_result(std::trunc(operand.as_number()))) : Value(operand.as_number());
}

Value html_escape(const Value& operand) {
  std::string out;
  for (char c : operand.str()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

int64_t length_of(const Value& operand) {
  if (operand.is_array()) return int64_t(operand.items().size());
  if (operand.is_string()) return int64_t(utf8_length(operand.as_string()));
  if (operand.has_attributes()) return int64_t(operand.attributes().entries.size());
  fail("cannot take the length of {}", operand.type_name());
}

Value sequence_filter(const std::string& name, const Value& operand) {
  Array items;
  if (operand.is_array()) {
    items = operand.items();
  } else if (operand.is_string()) {
    check_list_size(utf8_length(operand.as_string()));
    for (std::string& character : utf8_characters(operand.as_string())) items.emplace_back(std::move(character));
  } else {
    fail("cannot apply {} to {}", name, operand.type_name());
  }
  if (name == "list") return Value::array(std::move(items));
  if (name == "first") return items.empty() ? Value() : items.front();
  if (name == "last") return items.empty() ? Value() : items.back();
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    if (!operand.is_string()) return Value::array(std::move(items));
    std::string text;
    for (const Value& character : items) text += character.as_string();
    return Value(std::move(text));
  }
  Array unique;  // "unique"
  for (const Value& item : items) {
    charge_steps(unique.size());
    if (std::none_of(unique.begin(), unique.end(), [&](const Value& seen) { return loosely_equal(seen, item); }))
      unique.push_back(item);
  }
  return Value::array(std::move(unique));
}

Value string_filter(const std::string& name, const Value& operand, const Arguments& args) {
  MLA_CHECK(operand.is_string(), "cannot apply {} to {}", name, operand.type_name());
  const std::string& text = operand.as_string();
  if (name == "upper" || name == "lower") return Value(ascii_case(text, name == "upper"));
  if (name == "title") return Value(title_case(text));
  if (name == "capitalize") return string_method(text, "capitalize").function()(args);
  if (name == "trim") return Value(strip(text, true, true));
  if (name == "indent") return indent_filter(operand, args);
  return string_method(text, "replace").function()(args);  // "replace"
}

}  // namespace

Value apply_filter(const std::string& name, const Value& operand, const Arguments& args) {
  if (name == "safe") return operand;
  if (name == "tojson") return to_json_filter(operand, args);
  if (name == "string") return Value(operand.str());
  if (name == "length" || name == "count") return Value(length_of(operand));
  if (name == "list" || name == "first" || name == "last" || name == "reverse" || name == "unique")
    return sequence_filter(name, operand);
  if (name == "sort") return sort_filter(operand, args);
  if (name == "join") {
    const Value* separator = args.get(0, "d");
    std::string out;
    const Value items = sequence_filter("list", operand);
    for (size_t i = 0; i < items.items().size(); ++i) {
      out += (i > 0 && separator ? separator->str() : "") + items.items()[i].str();
      check_string_size(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "trim" || name == "indent" ||
      name == "replace")
    return string_filter(name, operand, args);
  if (name == "int" || name == "float") return number_filter(name, operand, args);
  if (name == "abs") {
    MLA_CHECK(operand.is_number(), "abs needs a number, got {}", operand.type_name());
    return operand.kind() == ValueKind::Int ? Value(int64_t(std::llabs(operand.as_int()))) : Value(std::fabs(operand.as_number()));
  }
  if (name == "bool") return Value(operand.truthy());
  if (name == "items") {
    MLA_CHECK(operand.has_attributes(), "items needs a dict, got {}", operand.type_name());
    return dict_method(operand, "items").function()(args);
  }
  if (name == "dictsort") {
    MLA_CHECK(operand.has_attributes(), "dictsort needs a dict, got {}", operand.type_name());
    return dictsort(operand, args);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const bool boolean = bool_argument(args, 1, "boolean", false);
    if (operand.is_undefined() || (boolean && !operand.truthy())) return fallback ? *fallback : Value("");
    return operand;
  }
  if (name == "selectattr" || name == "rejectattr") return select_attribute(operand, args, name == "selectattr");
  if (name == "map") return map_filter(operand, args);
  if (name == "escape" || name == "e") return html_escape(operand);
  fail("unsupported filter '{}'", name);
}

bool known_filter(std::string_view name) {
  static const std::set<std::string_view> kFilters = {
      "safe",  "tojson", "string",   "length",     "count", "list",    "first",    "last",   "reverse",
      "unique", "sort",  "join",     "upper",      "lower", "title",   "capitalize", "trim", "indent",
      "replace", "int",  "float",    "abs",        "bool",  "items",   "dictsort", "default", "d",
      "selectattr", "rejectattr", "map", "escape", "e"};
  return kFilters.count(name) > 0;
}

bool run_test(const std::string& name, const Value& operand, const Arguments& args) {
  const auto other = [&]() -> const Value& { return argument(args, 0, "other", name); };
  if (name == "defined") return !operand.is_undefined();
  if (name == "undefined") return operand.is_undefined();
  if (name == "none") return operand.is_none();
  if (name == "boolean") return operand.kind() == ValueKind::Bool;
  if (name == "true") return operand.kind() == ValueKind::Bool && operand.as_bool();
  if (name == "false") return operand.kind() == ValueKind::Bool && !operand.as_bool();
  if (name == "string") return operand.is_string();
  if (name == "number") return operand.is_number();
  if (name == "integer") return operand.kind() == ValueKind::Int;
  if (name == "float") return operand.kind() == ValueKind::Float;
  if (name == "mapping") return operand.is_object();
  if (name == "iterable") return operand.is_array() || operand.is_string() || operand.is_object();
  if (name == "sequence") return operand.is_array() || operand.is_string() || operand.is_object();
  if (name == "callable") return operand.kind() == ValueKind::Callable;
  if (name == "lower") return operand.is_string() && operand.as_string() == ascii_case(operand.as_string(), false);
  if (name == "upper") return operand.is_string() && operand.as_string() == ascii_case(operand.as_string(), true);
  if (name == "odd" || name == "even") {
    MLA_CHECK(operand.kind() == ValueKind::Int, "'{}' needs an integer, got {}", name, operand.type_name());
    return (operand.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "eq" || name == "equalto" || name == "sameas") return loosely_equal(operand, other());
  if (name == "ne") return !loosely_equal(operand, other());
  if (name == "in") return contains(other(), operand);
  fail("unsupported test '{}'", name);
}

bool known_test(std::string_view name) {
  static const std::set<std::string_view> kTests = {
      "defined", "undefined", "none", "boolean", "true", "false", "string", "number", "integer", "float", "mapping",
      "iterable", "sequence", "callable", "lower", "upper", "odd", "even", "eq", "equalto", "sameas", "ne", "in"};
  return kTests.count(name) > 0;
}

namespace {

Value range_function(const Arguments& args) {
  MLA_CHECK(!args.positional.empty() && args.positional.size() <= 3, "range takes 1 to 3 integers");
  for (const Value& v : args.positional) MLA_CHECK(v.kind() == ValueKind::Int, "range takes integers, got {}", v.type_name());
  const bool one = args.positional.size() == 1;
  const int64_t start = one ? 0 : args.positional[0].as_int();
  const int64_t stop = one ? args.positional[0].as_int() : args.positional[1].as_int();
  const int64_t step = args.positional.size() == 3 ? args.positional[2].as_int() : 1;
  MLA_CHECK(step != 0, "range() step must not be zero");
  // Counted in unsigned arithmetic, which cannot overflow where int64 would.
  const bool empty = step > 0 ? stop <= start : stop >= start;
  const uint64_t span = step > 0 ? uint64_t(stop) - uint64_t(start) : uint64_t(start) - uint64_t(stop);
  const uint64_t stride = step > 0 ? uint64_t(step) : uint64_t(-(step + 1)) + 1;
  const uint64_t count = empty ? 0 : (span - 1) / stride + 1;
  check_list_size(size_t(count));
  Array items;
  for (uint64_t k = 0; k < count; ++k) items.emplace_back(int64_t(uint64_t(start) + k * uint64_t(step)));
  return Value::array(std::move(items));
}

Value namespace_function(const Arguments& args) {
  Object entries;
  MLA_CHECK(args.positional.size() <= 1, "namespace takes at most one positional argument");
  if (!args.positional.empty()) {
    MLA_CHECK(args.positional[0].is_object(), "namespace's argument must be a dict");
    entries = args.positional[0].attributes();
  }
  for (const auto& [key, value] : args.keywords) entries.set(key, value);
  return Value::name_space(std::move(entries));
}

// strftime_now(format) in local time: %Y %m %d %b %B %H %M %% as the reference formats them.
Value strftime_now(const Arguments& args) {
  const Value& format = argument(args, 0, "format", "strftime_now");
  MLA_CHECK(format.is_string(), "strftime_now takes a format string");
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  std::string out;
  const std::string& f = format.as_string();
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%' || i + 1 >= f.size() || std::string_view("YmdbBHM%").find(f[i + 1]) == std::string_view::npos) {
      out += f[i];
      continue;
    }
    char buffer[64];
    const char spec[] = {'%', f[++i], '\0'};
    out.append(buffer, std::strftime(buffer, sizeof buffer, spec, &local));
  }
  return Value(std::move(out));
}

}  // namespace

const Object& global_functions() {
  static const Object globals = [] {
    Object g;
    g.set("true", Value(true));
    g.set("false", Value(false));
    g.set("none", Value::none());
    g.set("True", Value(true));
    g.set("False", Value(false));
    g.set("None", Value::none());
    g.set("range", Value::function(range_function));
    g.set("namespace", Value::function(namespace_function));
    g.set("strftime_now", Value::function(strftime_now));
    g.set("raise_exception", Value::function([](const Arguments& args) -> Value {
      fail("the template raised an exception: {}", args.positional.empty() ? "" : args.positional[0].str());
    }));
    return g;
  }();
  return globals;
}

}  // namespace mlaserve::jinja
