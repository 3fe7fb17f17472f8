#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "base/error.h"
#include "jinja/budget.h"

namespace mlaserve::jinja {

const Value* Arguments::keyword(std::string_view name) const {
  for (const auto& [key, value] : keywords)
    if (key == name) return &value;
  return nullptr;
}

const Value* Arguments::get(size_t index, std::string_view name) const {
  return index < positional.size() ? &positional[index] : keyword(name);
}

const Value* Object::find(std::string_view key) const {
  for (const auto& entry : entries)
    if (entry.first == key) return &entry.second;
  return nullptr;
}

void Object::set(std::string key, Value value) {
  for (auto& entry : entries)
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value::Value(bool value) : kind_(Kind::Bool), bool_(value) {}
Value::Value(int64_t value) : kind_(Kind::Int), int_(value) {}
Value::Value(double value) : kind_(Kind::Float), float_(value) {}
Value::Value(std::string value) : kind_(Kind::String), string_(std::move(value)) {
  charge_string(string_.size(), string_.size());
}

Value Value::array(Array items) {
  check_list_size(items.size());
  charge_steps(items.size());
  Value v;
  v.kind_ = Kind::List;
  v.array_ = std::make_shared<Array>(std::move(items));
  return v;
}

Value Value::tuple(Array items) {
  Value v = array(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::object(Object items) {
  Value v;
  v.kind_ = Kind::Dict;
  v.object_ = std::make_shared<Object>(std::move(items));
  return v;
}

Value Value::object() { return object(Object{}); }

Value Value::name_space(Object items) {
  Value v = object(std::move(items));
  v.kind_ = Kind::Namespace;
  return v;
}

Value Value::function(Function function) {
  Value v;
  v.kind_ = Kind::Callable;
  v.function_ = std::make_shared<Function>(std::move(function));
  return v;
}

// A walk of the containers reachable from this value, each visited once (lists that share
// lists can hold exponentially many paths to one, and chains can nest too deep to recurse),
// each a step of the render's budget (a loop nesting a value in itself walks it every pass).
bool Value::reaches(const Value& container) const {
  std::vector<const Value*> pending = {this};
  std::unordered_set<const void*> visited;
  while (!pending.empty()) {
    const Value& value = *pending.back();
    pending.pop_back();
    if (value.same_container(container)) return true;
    if (value.kind_ == Kind::List && visited.insert(value.array_.get()).second) {
      charge_steps(1);
      for (const Value& item : *value.array_) pending.push_back(&item);
    }
    if ((value.kind_ == Kind::Dict || value.kind_ == Kind::Namespace) && visited.insert(value.object_.get()).second) {
      charge_steps(1);
      for (const auto& entry : value.object_->entries) pending.push_back(&entry.second);
    }
  }
  return false;
}

// A container only this value holds gives its nested containers to a work list, which releases
// them one at a time: a chain of lists nested a million deep would otherwise be released
// recursively and overflow the stack.
Value::~Value() {
  if (!array_ && !object_) return;
  std::vector<Value> pending;
  move_nested_containers(pending);
  while (!pending.empty()) {
    Value value = std::move(pending.back());
    pending.pop_back();
    value.move_nested_containers(pending);
  }
}

void Value::move_nested_containers(std::vector<Value>& pending) {
  const auto take = [&](Value& item) {
    if (item.array_ || item.object_) pending.push_back(std::move(item));
  };
  if (array_ && array_.use_count() == 1)
    for (Value& item : *array_) take(item);
  if (object_ && object_.use_count() == 1)
    for (auto& entry : object_->entries) take(entry.second);
}

bool Value::same_container(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::List: return array_ == other.array_;
    case Kind::Dict:
    case Kind::Namespace: return object_ == other.object_;
    case Kind::Callable: return function_ == other.function_;
    default: return false;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return bool_;
    case Kind::Int: return int_ != 0;
    case Kind::Float: return float_ != 0 && !std::isnan(float_);
    case Kind::String: return !string_.empty();
    case Kind::List: return !array_->empty();
    case Kind::Dict: return !object_->entries.empty();
    case Kind::Namespace:
    case Kind::Callable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  static constexpr const char* kNames[] = {"undefined", "none", "boolean", "integer",   "float",
                                           "string",    "list", "dict",    "namespace", "function"};
  return kNames[int(kind_)];
}

// Python's repr of a float: the shortest digits that round-trip, in fixed notation for decimal
// exponents in [-4, 16) with at least one digit after the point, else d.ddde+XX.
std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0) return std::signbit(value) ? "-0.0" : "0.0";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, std::fabs(value), std::chars_format::scientific);
  const std::string scientific(buffer, result.ptr);
  const size_t e = scientific.find('e');
  std::string digits = scientific.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(scientific.substr(e + 1));  // value = d.ddd x 10^exponent
  const int k = int(digits.size());
  std::string out = value < 0 ? "-" : "";
  if (exponent >= 16 || exponent < -4) {
    out += digits.substr(0, 1);
    if (k > 1) out.append(".").append(digits, 1);
    return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) return out.append("0.").append(size_t(-exponent - 1), '0').append(digits);
  if (k <= exponent + 1) return out.append(digits).append(size_t(exponent + 1 - k), '0').append(".0");
  return out.append(digits, 0, size_t(exponent + 1)).append(".").append(digits, size_t(exponent + 1));
}

namespace {

// Python's repr of a string: single quotes unless it holds one and no double quote; backslash,
// the quote and control characters escaped.
std::string python_string(std::string_view text) {
  const bool double_quoted = text.find('\'') != std::string_view::npos && text.find('"') == std::string_view::npos;
  const char quote = double_quoted ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : text) {
    if (c == '\\' || c == uint8_t(quote))
      out += '\\', out += char(c);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  return out + quote;
}

// Deeper values are an error rather than a recursion that could overflow the stack.
constexpr int kMaxReprDepth = 1000;

void write_repr(const Value& value, int depth, std::string& out) {
  using Kind = Value::Kind;
  MLA_CHECK(depth <= kMaxReprDepth, "the value nests deeper than {} levels", kMaxReprDepth);
  switch (value.kind()) {
    case Kind::String: out += python_string(value.as_string()); return;
    case Kind::Undefined: out += "Undefined"; return;
    case Kind::List: {
      const bool tuple = value.is_tuple();
      out += tuple ? '(' : '[';
      const Array& items = value.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += ", ";
        write_repr(items[i], depth + 1, out);
        check_string_size(out.size());  // shared lists can nest exponentially many copies
      }
      out += tuple ? (items.size() == 1 ? ",)" : ")") : "]";
      return;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      const bool name_space = value.kind() == Kind::Namespace;
      out += name_space ? "<Namespace {" : "{";
      const auto& entries = value.attributes().entries;
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += ", ";
        out += python_string(entries[i].first) + ": ";
        write_repr(entries[i].second, depth + 1, out);
        check_string_size(out.size());
      }
      out += name_space ? "}>" : "}";
      return;
    }
    default: out += value.str();
  }
}

}  // namespace

std::string Value::repr() const {
  std::string out;
  write_repr(*this, 0, out);
  return out;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return bool_ ? "True" : "False";
    case Kind::Int: return std::to_string(int_);
    case Kind::Float: return python_float(float_);
    case Kind::String: return string_;
    case Kind::Callable: return "<function>";
    default: return repr();
  }
}

namespace {

bool equal_at_depth(const Value& a, const Value& b, int depth) {
  using Kind = Value::Kind;
  MLA_CHECK(depth <= 1000, "values nested deeper than 1000 levels compared");
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Kind::Bool; };
  if (numeric(a) && numeric(b)) return a.as_number() == b.as_number();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.as_string() == b.as_string();
    case Kind::List: {  // item by item, as Python compares lists
      if (a.same_container(b)) return true;
      if (a.items().size() != b.items().size()) return false;
      charge_steps(a.items().size());
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal_at_depth(a.items()[i], b.items()[i], depth + 1)) return false;
      return true;
    }
    case Kind::Dict: {  // the same keys with equal values, in any order
      if (a.same_container(b)) return true;
      const auto& entries = a.attributes().entries;
      if (entries.size() != b.attributes().entries.size()) return false;
      charge_steps(entries.size());
      for (const auto& [key, value] : entries) {
        const Value* other = b.attributes().find(key);
        if (!other || !equal_at_depth(value, *other, depth + 1)) return false;
      }
      return true;
    }
    default: return a.same_container(b);
  }
}

}  // namespace

bool loosely_equal(const Value& a, const Value& b) { return equal_at_depth(a, b, 0); }

namespace {

std::string ascii_lower(std::string text) {
  for (char& c : text)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return text;
}

}  // namespace

int compare(const Value& a, const Value& b, bool case_sensitive) {
  const auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::Bool; };
  if (numeric(a) && numeric(b)) return a.as_number() < b.as_number() ? -1 : a.as_number() > b.as_number() ? 1 : 0;
  if ((a.is_none() && b.is_none()) || (a.is_undefined() && b.is_undefined())) return 0;
  if (a.is_array() && b.is_array()) {  // item by item, then the shorter first
    const size_t n = std::min(a.items().size(), b.items().size());
    for (size_t i = 0; i < n; ++i)
      if (const int order = compare(a.items()[i], b.items()[i], case_sensitive)) return order;
    return a.items().size() < b.items().size() ? -1 : a.items().size() > b.items().size() ? 1 : 0;
  }
  MLA_CHECK(a.is_string() && b.is_string(), "cannot compare {} with {}", a.type_name(), b.type_name());
  const std::string x = case_sensitive ? a.as_string() : ascii_lower(a.as_string());
  const std::string y = case_sensitive ? b.as_string() : ascii_lower(b.as_string());
  return x < y ? -1 : x > y ? 1 : 0;
}

namespace {

// Decodes one UTF-8 sequence at text[i]; invalid bytes decode as themselves (one byte).
uint32_t decode_utf8(std::string_view text, size_t& i) {
  const auto byte = [&](size_t k) { return uint8_t(text[k]); };
  const uint8_t lead = byte(i);
  const int length = lead < 0x80 ? 1 : (lead >> 5) == 6 ? 2 : (lead >> 4) == 14 ? 3 : (lead >> 3) == 30 ? 4 : 1;
  if (length == 1 || i + size_t(length) > text.size()) return byte(i++);
  uint32_t code = lead & (0x7F >> length);
  for (int k = 1; k < length; ++k) {
    if ((byte(i + size_t(k)) & 0xC0) != 0x80) return byte(i++);
    code = (code << 6) | (byte(i + size_t(k)) & 0x3F);
  }
  i += size_t(length);
  return code;
}

void append_u_escape(std::string& out, uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xF];
}

// JSON.stringify of a string: quotes, backslashes and control characters escaped; with
// ensure_ascii every UTF-16 unit from 0x7f up as \uXXXX too.
std::string string_to_json(std::string_view text, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    const uint32_t code = decode_utf8(text, i);
    switch (code) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (code < 0x20) {
      append_u_escape(out, code);
    } else if (ensure_ascii && code >= 0x7F) {
      if (code >= 0x10000) {
        append_u_escape(out, 0xD800 + ((code - 0x10000) >> 10));
        append_u_escape(out, 0xDC00 + ((code - 0x10000) & 0x3FF));
      } else {
        append_u_escape(out, code);
      }
    } else {
      out.append(text.substr(start, i - start));
    }
  }
  return out + "\"";
}

// Deeper values are an error rather than a recursion that could overflow the stack.
constexpr int kMaxJsonDepth = 1000;

void write_json(const Value& value, const JsonFormat& format, int depth, std::string& out) {
  using Kind = Value::Kind;
  MLA_CHECK(depth <= kMaxJsonDepth, "the value nests deeper than {} levels", kMaxJsonDepth);
  const std::string item_separator = !format.item_separator.empty() ? format.item_separator
                                     : format.indent > 0            ? ","
                                                                    : ", ";
  const std::string key_separator = !format.key_separator.empty() ? format.key_separator : ": ";
  check_string_size(size_t(format.indent) * size_t(depth + 1));
  std::string base(size_t(format.indent * depth) + 1, ' ');  // a newline and this depth's indent
  base[0] = '\n';
  const std::string child = base + std::string(size_t(format.indent), ' ');
  switch (value.kind()) {
    case Kind::Undefined: throw Error("cannot convert an undefined value to JSON");
    case Kind::None: out += "null"; return;
    case Kind::Bool: out += value.as_bool() ? "true" : "false"; return;
    case Kind::Int: out += std::to_string(value.as_int()); return;
    case Kind::Float: {  // Python's json.dumps: repr, and NaN and Infinity as JavaScript spells them
      const double x = value.as_number();
      out += std::isnan(x) ? "NaN" : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity") : python_float(x);
      return;
    }
    case Kind::String: out += string_to_json(value.as_string(), format.ensure_ascii); return;
    case Kind::Callable: throw Error("cannot convert a function to JSON");
    case Kind::List: {
      out += '[';
      const Array& items = value.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_separator;
        if (format.indent > 0) out += child;
        write_json(items[i], format, depth + 1, out);
        check_string_size(out.size());  // shared lists can nest exponentially many copies
      }
      if (format.indent > 0 && !items.empty()) out += base;
      out += ']';
      return;
    }
    case Kind::Dict:
    case Kind::Namespace: {
      auto entries = value.attributes().entries;
      if (format.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_separator;
        if (format.indent > 0) out += child;
        out += string_to_json(entries[i].first, format.ensure_ascii) + key_separator;
        write_json(entries[i].second, format, depth + 1, out);
        check_string_size(out.size());
      }
      if (format.indent > 0 && !entries.empty()) out += base;
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string to_json(const Value& value, const JsonFormat& format) {
  std::string out;
  write_json(value, format, 0, out);
  return out;
}

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(int64_t(json.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array items;
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::array(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object object;
      for (const auto& [key, item] : json.items()) object.set(key, from_json(item));
      return Value::object(std::move(object));
    }
    default: throw Error("cannot convert binary JSON to a template value");
  }
}

size_t utf8_length(std::string_view text) {
  size_t length = 0;
  for (size_t i = 0; i < text.size(); ++length) decode_utf8(text, i);
  return length;
}

std::vector<size_t> utf8_offsets(std::string_view text) {
  std::vector<size_t> offsets;
  for (size_t i = 0; i < text.size();) {
    offsets.push_back(i);
    decode_utf8(text, i);
  }
  offsets.push_back(text.size());
  return offsets;
}

std::vector<std::string> utf8_characters(std::string_view text) {
  std::vector<std::string> characters;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    decode_utf8(text, i);
    characters.emplace_back(text.substr(start, i - start));
  }
  return characters;
}

}  // namespace mlaserve::jinja
