// What templates call, as Jinja2's sandbox gives it: filters and tests (filters.cc), attributes
// and methods of values, operators, and the globals (range, namespace, dict, joiner,
// raise_exception, strftime_now). Errors are Errors without a line; the renderer adds the line
// of the statement that reached them.
#pragma once
#include <string>
#include <string_view>

#include "jinja/value.h"

namespace mlaserve::jinja {

Value apply_filter(const std::string& name, const Value& operand, const Arguments& args);
bool run_test(const std::string& name, const Value& operand, const Arguments& args);

// value.name or value['name']: a dict's entry, else a method bound to the value (Python's str
// methods; dict get, items, keys, values; list index, count), else undefined. Methods that
// would change a list or dict are an error, as the immutable sandbox makes them.
Value get_attribute(const Value& object, const std::string& name);
// value[index] of a list or string, negative from the end; undefined when out of range.
Value get_item(const Value& object, int64_t index);
// value[start:stop:step] of a list or string, as Python slices (null: the default bound).
Value slice_value(const Value& object, const int64_t* start, const int64_t* stop, int64_t step);
// Every binary operator but and/or, with Python's operand rules.
Value binary_operation(const std::string& op, const Value& left, const Value& right);

const Object& global_functions();

}  // namespace mlaserve::jinja
