// Jinja2's filters and tests, as its sandboxed environment runs them for transformers' chat
// templates: a filter that formats text applies to str(value), an undefined value iterates as
// empty, int and float fall back to their default where Python's conversion fails.
#include "jinja/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "base/error.h"
#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/chars.h"
#include "jinja/python_str.h"

namespace mlaserve::jinja {
namespace {

using ValueKind = Value::Kind;

bool is_numeric(const Value& v) { return v.is_number() || v.kind() == ValueKind::Bool; }

// What a filter iterates: a list's items, a string's characters, a dict's keys; undefined is empty.
Array iterated(const Value& operand, std::string_view filter) {
  if (operand.is_array()) return operand.items();
  Array items;
  if (operand.is_undefined()) return items;
  if (operand.is_string()) {
    check_list_size(utf8_length(operand.as_string()));
    for (std::string& character : utf8_characters(operand.as_string())) items.emplace_back(std::move(character));
    return items;
  }
  MLA_CHECK(operand.is_object(), "{} needs something to iterate, got {}", filter, operand.type_name());
  for (const auto& entry : operand.attributes().entries) items.emplace_back(entry.first);
  return items;
}

// Jinja2's attribute getter: a dotted path, each part an entry (or an index of a list).
Value attribute_path(const Value& item, const std::string& path) {
  Value value = item;
  for (size_t start = 0; start <= path.size();) {
    const size_t dot = std::min(path.find('.', start), path.size());
    value = get_attribute(value, path.substr(start, dot - start));
    start = dot + 1;
  }
  return value;
}

// The key a filter given `attribute` compares or sums: the item itself without one.
Value keyed(const Value& item, const Value* attribute) {
  if (!attribute || attribute->is_none()) return item;
  return attribute->kind() == ValueKind::Int ? get_item(item, attribute->as_int())
                                             : attribute_path(item, attribute->str());
}

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
  const bool reverse = bool_argument(args, 0, "reverse", false);
  const bool case_sensitive = bool_argument(args, 1, "case_sensitive", false);
  const Value* attribute = args.get(2, "attribute");
  Array items = iterated(operand, "sort");
  charge_sort(items.size());
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int order = compare(keyed(a, attribute), keyed(b, attribute), case_sensitive);
    return reverse ? order > 0 : order < 0;
  });
  return Value::array(std::move(items));
}

// min and max: the first least (greatest) item; undefined for an empty sequence.
Value extreme_filter(const Value& operand, const Arguments& args, bool greatest) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = args.get(1, "attribute");
  const Array items = iterated(operand, greatest ? "max" : "min");
  charge_steps(items.size());
  if (items.empty()) return Value();
  const Value* best = &items[0];
  for (const Value& item : items) {
    const int order = compare(keyed(item, attribute), keyed(*best, attribute), case_sensitive);
    if (greatest ? order > 0 : order < 0) best = &item;
  }
  return *best;
}

Value sum_filter(const Value& operand, const Arguments& args) {
  const Value* attribute = args.get(0, "attribute");
  const Value* start = args.get(1, "start");
  Value total = start ? *start : Value(int64_t(0));
  MLA_CHECK(!total.is_string(), "sum can't sum strings (use join)");
  for (const Value& item : iterated(operand, "sum")) total = binary_operation("+", total, keyed(item, attribute));
  return total;
}

// A test named by a filter's argument, applied with the arguments after it.
bool named_test(const Value& item, const Arguments& args, size_t name_index) {
  if (args.positional.size() <= name_index) return item.truthy();
  Arguments test_args;
  test_args.positional.assign(args.positional.begin() + std::ptrdiff_t(name_index) + 1, args.positional.end());
  test_args.keywords = args.keywords;
  return run_test(args.positional[name_index].str(), item, test_args);
}

// select and reject apply a test to each item, selectattr and rejectattr to an attribute of each.
Value select_filter(const Value& operand, const Arguments& args, bool by_attribute, bool select) {
  Array out;
  const Value* attribute = by_attribute ? &argument(args, 0, "attribute", "selectattr") : nullptr;
  for (const Value& item : iterated(operand, "select")) {
    if (named_test(keyed(item, attribute), args, by_attribute ? 1 : 0) == select) out.push_back(item);
  }
  return Value::array(std::move(out));
}

// map(attribute=name, default=value) or map(filter, arguments...).
Value map_filter(const Value& operand, const Arguments& args) {
  Array out;
  if (args.positional.empty()) {
    const Value* attribute = args.keyword("attribute");
    MLA_CHECK(attribute, "map needs a filter name or attribute=");
    const Value* fallback = args.keyword("default");
    for (const Value& item : iterated(operand, "map")) {
      Value value = keyed(item, attribute);
      out.push_back(value.is_undefined() && fallback ? *fallback : std::move(value));
    }
    return Value::array(std::move(out));
  }
  Arguments filter_args;
  filter_args.positional.assign(args.positional.begin() + 1, args.positional.end());
  filter_args.keywords = args.keywords;
  const std::string filter = args.positional[0].str();
  for (const Value& item : iterated(operand, "map")) out.push_back(apply_filter(filter, item, filter_args));
  return Value::array(std::move(out));
}

// batch(n, fill_with): lists of n items, the last filled up to n when fill_with is given.
Value batch_filter(const Value& operand, const Arguments& args) {
  const int64_t size = int_argument(args, 0, "linecount", 0);
  MLA_CHECK(size >= 1, "batch needs a positive size, got {}", size);
  const Value* fill = args.get(1, "fill_with");
  Array batches, batch;
  for (const Value& item : iterated(operand, "batch")) {
    if (int64_t(batch.size()) == size) batches.push_back(Value::array(std::exchange(batch, {})));
    batch.push_back(item);
  }
  if (batch.empty()) return Value::array(std::move(batches));
  if (fill && !fill->is_none()) {
    check_list_size(size_t(size));
    batch.resize(size_t(size), *fill);
  }
  batches.push_back(Value::array(std::move(batch)));
  return Value::array(std::move(batches));
}

// slice(n, fill_with): n columns, the first len % n one item longer (the others filled when given).
Value slice_filter(const Value& operand, const Arguments& args) {
  const int64_t slices = int_argument(args, 0, "slices", 0);
  MLA_CHECK(slices >= 1, "slice needs a positive count, got {}", slices);
  check_list_size(size_t(slices));
  const Value* fill = args.get(1, "fill_with");
  const Array items = iterated(operand, "slice");
  const size_t per_slice = items.size() / size_t(slices), longer = items.size() % size_t(slices);
  Array out;
  for (size_t k = 0, start = 0; k < size_t(slices); ++k) {
    const size_t end = start + per_slice + (k < longer ? 1 : 0);
    Array column(items.begin() + std::ptrdiff_t(start), items.begin() + std::ptrdiff_t(end));
    if (fill && !fill->is_none() && k >= longer) column.push_back(*fill);
    out.push_back(Value::array(std::move(column)));
    start = end;
  }
  return Value::array(std::move(out));
}

Value unique_filter(const Value& operand, const Arguments& args) {
  const bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = args.get(1, "attribute");
  Array unique, keys;
  for (const Value& item : iterated(operand, "unique")) {
    const Value key = keyed(item, attribute);
    MLA_CHECK(!key.is_array() && !key.has_attributes(), "unhashable type: '{}'", key.type_name());
    const Value folded = key.is_string() && !case_sensitive ? Value(ascii_case(key.as_string(), false)) : key;
    charge_steps(keys.size());
    if (std::any_of(keys.begin(), keys.end(), [&](const Value& seen) { return loosely_equal(seen, folded); })) continue;
    keys.push_back(folded);
    unique.push_back(item);
  }
  return Value::array(std::move(unique));
}

Value sequence_filter(const std::string& name, const Value& operand) {
  Array items = iterated(operand, name);
  if (name == "list") return Value::array(std::move(items));
  if (name == "first") return items.empty() ? Value() : items.front();
  if (name == "last") return items.empty() ? Value() : items.back();
  std::reverse(items.begin(), items.end());  // "reverse": a string stays a string
  if (!operand.is_string()) return Value::array(std::move(items));
  std::string text;
  for (const Value& character : items) text += character.as_string();
  return Value(std::move(text));
}

Value join_filter(const Value& operand, const Arguments& args) {
  const Value* separator = args.get(0, "d");
  const Value* attribute = args.get(1, "attribute");
  std::string out;
  const Array items = iterated(operand, "join");
  for (size_t i = 0; i < items.size(); ++i) {
    out += (i > 0 && separator ? separator->str() : "") + keyed(items[i], attribute).str();
    check_string_size(out.size());
  }
  return Value(std::move(out));
}

int64_t length_of(const Value& operand) {
  if (operand.is_undefined()) return 0;
  if (operand.is_array()) return int64_t(operand.items().size());
  if (operand.is_string()) return int64_t(utf8_length(operand.as_string()));
  if (operand.is_object()) return int64_t(operand.attributes().entries.size());
  fail("cannot take the length of {}", operand.type_name());
}

// Python's int(text, base) on a stripped string: a sign, digits, '_' between digits.
bool parse_integer(std::string text, int base, int64_t& out) {
  if (text.empty() || text.front() == '_' || text.back() == '_' || text.find("__") != std::string::npos) return false;
  std::erase(text, '_');
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, base);
  if (end == text.c_str() || *end != '\0' || std::isspace(uint8_t(text[0]))) return false;
  MLA_CHECK(errno != ERANGE, "integer '{}' out of range", text);
  out = value;
  return true;
}

// Python's float(text) on a stripped string.
bool parse_float(const std::string& text, double& out) {
  if (text.empty() || text.find_first_of("xXpP") != std::string::npos) return false;  // no C hex floats
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

// int(default=0, base=10) and float(default=0.0): Python's conversion, else the default.
Value number_filter(const std::string& name, const Value& operand, const Arguments& args) {
  const bool to_int = name == "int";
  const Value* given = args.get(0, "default");
  const Value fallback = given ? *given : to_int ? Value(int64_t(0)) : Value(0.0);
  if (is_numeric(operand)) {
    if (!to_int) return Value(operand.as_number());
    if (operand.kind() != ValueKind::Float) return Value(int64_t(operand.as_number()));
    MLA_CHECK(std::isfinite(operand.as_number()), "cannot convert float {} to integer", operand.str());
    MLA_CHECK(std::fabs(operand.as_number()) < 9.2e18, "integer {} out of range", operand.str());
    return Value(int64_t(operand.as_number()));
  }
  if (!operand.is_string()) return fallback;
  const std::string text = strip(operand.as_string(), true, true);
  int64_t integer = 0;
  double number = 0;
  if (to_int && parse_integer(text, int(int_argument(args, 1, "base", 10)), integer)) return Value(integer);
  if (!parse_float(text, number)) return fallback;
  if (!to_int) return Value(number);
  return std::isfinite(number) && std::fabs(number) < 9.2e18 ? Value(int64_t(number)) : fallback;
}

// round(precision=0, method='common'): 'common' is Python's round (ties to even on the exact
// binary value, as printf rounds); 'floor' and 'ceil' give floats.
Value round_filter(const Value& operand, const Arguments& args) {
  MLA_CHECK(is_numeric(operand), "round needs a number, got {}", operand.type_name());
  const int64_t precision = std::clamp<int64_t>(int_argument(args, 0, "precision", 0), -400, 400);
  const Value* method_value = args.get(1, "method");
  const std::string method = method_value ? method_value->str() : "common";
  MLA_CHECK(method == "common" || method == "floor" || method == "ceil",
            "round's method must be common, ceil or floor");
  const double x = operand.as_number(), scale = std::pow(10.0, double(precision));
  if (method != "common") return Value((method == "floor" ? std::floor(x * scale) : std::ceil(x * scale)) / scale);
  if (operand.kind() != ValueKind::Float && precision >= 0) return Value(int64_t(operand.as_number()));
  if (precision < 0) {
    const double rounded = std::nearbyint(x / std::pow(10.0, double(-precision))) * std::pow(10.0, double(-precision));
    return operand.kind() == ValueKind::Float ? Value(rounded) : Value(int64_t(rounded));
  }
  if (!std::isfinite(x)) return Value(x);
  return Value(std::strtod(fmt::format("{:.{}f}", x, precision).c_str(), nullptr));
}

Value abs_filter(const Value& operand) {
  MLA_CHECK(is_numeric(operand), "abs needs a number, got {}", operand.type_name());
  if (operand.kind() == ValueKind::Float) return Value(std::fabs(operand.as_number()));
  const int64_t n = operand.kind() == ValueKind::Bool ? int64_t(operand.as_bool()) : operand.as_int();
  MLA_CHECK(n != INT64_MIN, "integer out of range");
  return Value(n < 0 ? -n : n);
}

// truncate(length=255, killwords=False, end='...', leeway=5): at a word boundary unless killwords.
Value truncate_filter(const Value& operand, const Arguments& args) {
  const std::string text = operand.str();
  const int64_t length = int_argument(args, 0, "length", 255);
  const bool kill_words = bool_argument(args, 1, "killwords", false);
  const Value* end_value = args.get(2, "end");
  const std::string end = end_value ? end_value->str() : "...";
  const int64_t leeway = int_argument(args, 3, "leeway", 5);
  const auto end_length = int64_t(utf8_length(end));
  MLA_CHECK(length >= end_length, "expected length >= {}, got {}", end_length, length);
  MLA_CHECK(leeway >= 0, "expected leeway >= 0, got {}", leeway);
  if (int64_t(utf8_length(text)) <= length + leeway) return Value(text);
  const int64_t keep = length - end_length;
  std::string head = slice_value(Value(text), nullptr, &keep, 1).as_string();
  if (!kill_words) head = head.substr(0, std::min(head.size(), head.rfind(' ')));
  return Value(head + end);
}

// Python's \w+ runs, counting non-ASCII characters as word characters.
Value wordcount_filter(const Value& operand) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : operand.str()) {
    const bool word = is_word(c) || uint8_t(c) >= 0x80;
    words += word && !in_word;
    in_word = word;
  }
  return Value(words);
}

// striptags: tags and comments removed, entities decoded, whitespace runs made one space.
Value striptags_filter(const Value& operand) {
  const std::string text = operand.str();
  std::string bare;
  for (size_t i = 0; i < text.size();) {
    const bool comment = text.compare(i, 4, "<!--") == 0;
    const size_t close = comment ? text.find("-->", i) : text[i] == '<' ? text.find('>', i) : std::string::npos;
    if (close == std::string::npos) {
      bare += text[i++];
      continue;
    }
    i = close + (comment ? 3 : 1);
  }
  static const std::pair<std::string_view, std::string_view> kEntities[] = {
      {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#34;", "\""}, {"&#39;", "'"}, {"&nbsp;", " "}};
  std::string decoded;
  for (size_t i = 0; i < bare.size();) {
    const auto* entity = std::find_if(std::begin(kEntities), std::end(kEntities),
                                      [&](const auto& e) { return bare.compare(i, e.first.size(), e.first) == 0; });
    if (entity == std::end(kEntities)) {
      decoded += bare[i++];
      continue;
    }
    decoded += entity->second;
    i += entity->first.size();
  }
  std::string out;
  for (size_t i = 0; i < decoded.size();) {
    while (i < decoded.size() && is_space(decoded[i])) ++i;
    size_t end = i;
    while (end < decoded.size() && !is_space(decoded[end])) ++end;
    if (end > i) out += (out.empty() ? "" : " ") + decoded.substr(i, end - i);
    i = end;
  }
  return Value(std::move(out));
}

// Python's urllib quote: letters, digits and _.-~ kept (and '/' outside a query), the rest %XX.
std::string url_quote(const std::string& text, bool query) {
  std::string out;
  for (char c : text) {
    if (is_word(c) || c == '.' || c == '-' || c == '~' || (c == '/' && !query))
      out += c;
    else if (c == ' ' && query)
      out += '+';
    else
      out += fmt::format("%{:02X}", uint8_t(c));
  }
  check_string_size(out.size());
  return out;
}

// urlencode: a string quoted, a dict or a list of pairs as key=value&... of a query string.
Value urlencode_filter(const Value& operand) {
  if (!operand.is_object() && !operand.is_array()) return Value(url_quote(operand.str(), false));
  std::string out;
  const auto add = [&](const Value& key, const Value& value) {
    out += (out.empty() ? "" : "&") + url_quote(key.str(), true) + "=" + url_quote(value.str(), true);
  };
  if (operand.is_object()) {
    for (const auto& [key, value] : operand.attributes().entries) add(Value(key), value);
    return Value(std::move(out));
  }
  for (const Value& pair : operand.items()) {
    MLA_CHECK(pair.is_array() && pair.items().size() == 2, "urlencode needs a dict or a list of pairs");
    add(pair.items()[0], pair.items()[1]);
  }
  return Value(std::move(out));
}

// Jinja2's title filter: words split at runs of '-', whitespace and opening brackets.
std::string title_words(std::string text) {
  bool word_start = true;
  for (char& c : text) {
    const bool separator = c == '-' || is_space(c) || c == '(' || c == '{' || c == '[' || c == '<';
    if (!separator) c = word_start ? to_upper(c) : to_lower(c);
    word_start = separator;
  }
  return text;
}

Value indent_filter(const std::string& text, const Arguments& args) {
  const Value* width = args.get(0, "width");
  const int64_t spaces = width && width->is_string() ? 0 : std::max<int64_t>(0, int_argument(args, 0, "width", 4));
  check_string_size(size_t(spaces));
  const std::string prefix = width && width->is_string() ? width->as_string() : std::string(size_t(spaces), ' ');
  const bool first = bool_argument(args, 1, "first", false), blank = bool_argument(args, 2, "blank", false);
  std::string out;
  size_t start = 0;
  for (int line = 0; start <= text.size(); ++line) {
    const size_t end = std::min(text.find('\n', start), text.size());
    const std::string piece = text.substr(start, end - start);
    if (line > 0) out += '\n';
    out += ((line > 0 || first) && (blank || !piece.empty()) ? prefix : "") + piece;
    check_string_size(out.size());
    start = end + 1;
  }
  return Value(std::move(out));
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

// format(*args, **kwargs): printf-style, `value % args` (or the keywords as a dict).
Value format_filter(const Value& operand, const Arguments& args) {
  MLA_CHECK(args.positional.empty() || args.keywords.empty(), "format takes positional or keyword arguments, not both");
  if (args.positional.empty() && !args.keywords.empty()) {
    Object named;
    for (const auto& [key, value] : args.keywords) named.set(key, value);
    return Value(printf_format(operand.str(), Value::object(std::move(named))));
  }
  return Value(printf_format(operand.str(), Value::tuple(args.positional)));
}

// The filters that apply to str(value) and give a string.
Value text_filter(const std::string& name, const Value& operand, const Arguments& args) {
  const std::string text = operand.str();
  if (name == "upper" || name == "lower") return Value(ascii_case(text, name == "upper"));
  if (name == "title") return Value(title_words(text));
  if (name == "capitalize") return Value(capitalize(text));
  if (name == "trim") return Value(strip(text, true, true, args.get(0, "chars")));
  if (name == "indent") return indent_filter(text, args);
  if (name == "center") return Value(pad(text, int_argument(args, 0, "width", 80), " ", '^'));
  if (name == "truncate") return truncate_filter(operand, args);
  if (name == "wordcount") return wordcount_filter(operand);
  if (name == "striptags") return striptags_filter(operand);
  if (name == "format") return format_filter(operand, args);
  if (name == "escape" || name == "e" || name == "forceescape") return html_escape(operand);
  MLA_CHECK(name == "replace", "unsupported filter '{}'", name);
  const Value method = get_attribute(Value(text), "replace");
  return method.function()(args);
}

const std::set<std::string_view>& text_filters() {
  static const std::set<std::string_view> names = {"upper",  "lower",  "title",    "capitalize",  "trim",
                                                   "indent", "center", "truncate", "wordcount",   "striptags",
                                                   "format", "escape", "e",        "forceescape", "replace"};
  return names;
}

// attr(name): an attribute, not an entry: a namespace's, or a string's or list's method.
Value attr_filter(const Value& operand, const Arguments& args) {
  const std::string name = argument(args, 0, "name", "attr").str();
  return operand.is_object() ? Value() : get_attribute(operand, name);
}

}  // namespace

Value apply_filter(const std::string& name, const Value& operand, const Arguments& args) {
  if (name == "safe") return operand;
  if (name == "tojson") return to_json_filter(operand, args);
  if (name == "string") return Value(operand.str());
  if (name == "length" || name == "count") return Value(length_of(operand));
  if (name == "list" || name == "first" || name == "last" || name == "reverse") return sequence_filter(name, operand);
  if (name == "unique") return unique_filter(operand, args);
  if (name == "sort") return sort_filter(operand, args);
  if (name == "min" || name == "max") return extreme_filter(operand, args, name == "max");
  if (name == "sum") return sum_filter(operand, args);
  if (name == "join") return join_filter(operand, args);
  if (text_filters().count(name)) return text_filter(name, operand, args);
  if (name == "int" || name == "float") return number_filter(name, operand, args);
  if (name == "round") return round_filter(operand, args);
  if (name == "abs") return abs_filter(operand);
  if (name == "bool") return Value(operand.truthy());
  if (name == "items" || name == "dictsort") {
    MLA_CHECK(operand.is_object() || operand.is_undefined(), "{} needs a dict, got {}", name, operand.type_name());
    if (operand.is_undefined()) return Value::array();
    return name == "items" ? get_attribute(operand, "items").function()(args) : dictsort(operand, args);
  }
  if (name == "default" || name == "d") {
    const Value* fallback = args.get(0, "default_value");
    const bool boolean = bool_argument(args, 1, "boolean", false);
    if (operand.is_undefined() || (boolean && !operand.truthy())) return fallback ? *fallback : Value("");
    return operand;
  }
  if (name == "select" || name == "reject") return select_filter(operand, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select_filter(operand, args, true, name == "selectattr");
  if (name == "map") return map_filter(operand, args);
  if (name == "batch") return batch_filter(operand, args);
  if (name == "slice") return slice_filter(operand, args);
  if (name == "attr") return attr_filter(operand, args);
  if (name == "urlencode") return urlencode_filter(operand);
  fail("unsupported filter '{}'", name);
}

bool known_filter(std::string_view name) {
  static const std::set<std::string_view> kFilters = {
      "safe",       "tojson", "string", "length",   "count",   "list",     "first",  "last",   "reverse",
      "unique",     "sort",   "min",    "max",      "sum",     "join",     "int",    "float",  "round",
      "abs",        "bool",   "items",  "dictsort", "default", "d",        "select", "reject", "selectattr",
      "rejectattr", "map",    "batch",  "slice",    "attr",    "urlencode"};
  return kFilters.count(name) > 0 || text_filters().count(name) > 0;
}

namespace {

// Python's value % 2 compared with `remainder`, for the odd and even tests.
bool has_remainder(const std::string& test, const Value& operand, int64_t remainder) {
  MLA_CHECK(is_numeric(operand), "'{}' needs a number, got {}", test, operand.type_name());
  return loosely_equal(binary_operation("%", operand, Value(int64_t(2))), Value(remainder));
}

// str(value).islower() (isupper()): a cased letter and none of the other case.
bool in_case(const Value& operand, bool upper) {
  const std::string text = operand.str();
  const bool cased = std::any_of(text.begin(), text.end(), [&](char c) { return upper ? is_upper(c) : is_lower(c); });
  const bool other = std::any_of(text.begin(), text.end(), [&](char c) { return upper ? is_lower(c) : is_upper(c); });
  return cased && !other;
}

const char* comparison_operator(const std::string& test) {
  if (test == "lt" || test == "lessthan") return "<";
  if (test == "le") return "<=";
  if (test == "gt" || test == "greaterthan") return ">";
  if (test == "ge") return ">=";
  return nullptr;
}

}  // namespace

bool run_test(const std::string& name, const Value& operand, const Arguments& args) {
  const auto other = [&]() -> const Value& { return argument(args, 0, "other", name); };
  if (name == "defined") return !operand.is_undefined();
  if (name == "undefined") return operand.is_undefined();
  if (name == "none") return operand.is_none();
  if (name == "boolean") return operand.kind() == ValueKind::Bool;
  if (name == "true") return operand.kind() == ValueKind::Bool && operand.as_bool();
  if (name == "false") return operand.kind() == ValueKind::Bool && !operand.as_bool();
  if (name == "string") return operand.is_string();
  if (name == "number") return is_numeric(operand);
  if (name == "integer") return operand.kind() == ValueKind::Int;
  if (name == "float") return operand.kind() == ValueKind::Float;
  if (name == "mapping") return operand.is_object();
  if (name == "iterable" || name == "sequence")
    return operand.is_array() || operand.is_string() || operand.is_object() || operand.is_undefined();
  if (name == "callable") return operand.kind() == ValueKind::Callable;
  if (name == "lower" || name == "upper") return in_case(operand, name == "upper");
  if (name == "odd" || name == "even") return has_remainder(name, operand, name == "odd" ? 1 : 0);
  if (name == "divisibleby") return loosely_equal(binary_operation("%", operand, other()), Value(int64_t(0)));
  if (const char* op = comparison_operator(name)) return binary_operation(op, operand, other()).truthy();
  if (name == "eq" || name == "equalto" || name == "==") return loosely_equal(operand, other());
  if (name == "ne" || name == "!=") return !loosely_equal(operand, other());
  if (name == "sameas") return operand.kind() == other().kind() && loosely_equal(operand, other());
  if (name == "in") return binary_operation("in", operand, other()).truthy();
  if (name == "escaped") return false;  // no value here is markup
  if (name == "filter") return operand.is_string() && known_filter(operand.as_string());
  if (name == "test") return operand.is_string() && known_test(operand.as_string());
  fail("unsupported test '{}'", name);
}

bool known_test(std::string_view name) {
  static const std::set<std::string_view> kTests = {
      "defined",     "undefined", "none",     "boolean",  "true",     "false",       "string", "number", "integer",
      "float",       "mapping",   "iterable", "sequence", "callable", "lower",       "upper",  "odd",    "even",
      "divisibleby", "lt",        "lessthan", "le",       "gt",       "greaterthan", "ge",     "eq",     "equalto",
      "==",          "ne",        "!=",       "sameas",   "in",       "escaped",     "filter", "test"};
  return kTests.count(name) > 0;
}

}  // namespace mlaserve::jinja
