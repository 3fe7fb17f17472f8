// The values a chat template computes with, as Python's (None, bools, ints, floats, strings,
// lists and tuples, dicts in insertion order, namespaces, callables), lists, dicts and
// namespaces shared by reference as in Python. Printing is Python's str and repr and tojson is
// Python's json.dumps, as Jinja2 under transformers renders chat templates (True, None, 1.0,
// ['a', 1], (1, 2), {'k': None}).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlaserve::jinja {

class Value;
using Array = std::vector<Value>;
struct Object;

// A call's arguments: positional, then keyword ones in the order written.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  const Value* keyword(std::string_view name) const;
  // Positional argument `index`, else keyword `name`, else nullptr.
  const Value* get(size_t index, std::string_view name) const;
};
using Function = std::function<Value(const Arguments&)>;

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value() = default;  // undefined
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  Value& operator=(const Value&) = default;
  Value& operator=(Value&&) noexcept = default;
  ~Value();
  static Value none();
  Value(bool value);
  Value(int64_t value);
  Value(int value) : Value(int64_t(value)) {}
  Value(double value);
  Value(std::string value);
  Value(const char* value) : Value(std::string(value)) {}
  static Value array(Array items = {});
  static Value tuple(Array items);  // a list that prints as Python's tuple
  static Value object(Object items);
  static Value object();
  static Value name_space(Object items);
  static Value function(Function function);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_array() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && tuple_; }
  bool is_object() const { return kind_ == Kind::Dict; }
  // A dict or a namespace: what attributes are read from.
  bool has_attributes() const { return kind_ == Kind::Dict || kind_ == Kind::Namespace; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_number() const { return kind_ == Kind::Int ? double(int_) : kind_ == Kind::Bool ? double(bool_) : float_; }
  const std::string& as_string() const { return string_; }
  Array& items() const { return *array_; }
  Object& attributes() const { return *object_; }
  const Function& function() const { return *function_; }
  bool same_container(const Value& other) const;
  // Whether this value is `container` or holds it at any depth: storing such a value into
  // `container` would make a reference cycle its shared pointers never free.
  bool reaches(const Value& container) const;

  bool truthy() const;
  std::string str() const;   // Python's str: as {{ value }} prints it
  std::string repr() const;  // Python's repr: as a list prints its items
  const char* type_name() const;

 private:
  // Moves the lists, dicts and namespaces held by a container only this value holds into `pending`.
  void move_nested_containers(std::vector<Value>& pending);

  Kind kind_ = Kind::Undefined;
  bool bool_ = false, tuple_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<Array> array_;
  std::shared_ptr<Object> object_;
  std::shared_ptr<Function> function_;
};

struct Object {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Python's ==: numbers by value (1 == 1.0, True == 1), strings by content, lists item by item,
// dicts by keys and values, namespaces and functions by identity; undefined equals only
// undefined (Jinja2's Undefined).
bool loosely_equal(const Value& a, const Value& b);
// Ordering for sort, min, max and dictsort: numbers (and bools) by value, strings by bytes
// (lowercased unless case_sensitive), lists item by item; other pairs throw Error.
int compare(const Value& a, const Value& b, bool case_sensitive);

struct JsonFormat {
  int indent = 0;  // 0: one line
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator, key_separator;  // empty: ", " and ": " (indented: ",")
};
// Python's json.dumps (an undefined value is an Error, as it is for Jinja2's tojson).
std::string to_json(const Value& value, const JsonFormat& format = {});
// Python's repr of a float.
std::string python_float(double value);

// A request's JSON as values, as Python's json.loads reads it (1.0 stays a float).
Value from_json(const nlohmann::ordered_json& json);

// UTF-8 helpers: code points, so that length, indexing and slicing count characters.
std::vector<std::string> utf8_characters(std::string_view text);
size_t utf8_length(std::string_view text);
// Where each code point starts, in bytes, then text.size().
std::vector<size_t> utf8_offsets(std::string_view text);

}  // namespace mlaserve::jinja
