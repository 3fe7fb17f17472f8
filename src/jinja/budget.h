// Bounds on what one render may build, so that a template whose work grows without end (a
// namespace that stores its own JSON doubles per message; loops nested over range()) fails with
// an Error naming the bound, instead of exhausting the server's memory or time. Template::render
// opens a budget on its thread; outside a render only the per-value bounds apply.
#pragma once
#include <cstddef>

namespace mlaserve::jinja {

struct RenderLimits {
  size_t string_bytes = size_t(32) << 20;  // one string: the output, a concatenation, tojson's text
  size_t list_items = size_t(1) << 20;     // one list
  // The published templates render a 1,000-message conversation with 50 tools in 5,000 steps,
  // building 1.4 MB of strings; a second's work is about a million steps.
  size_t built_bytes = size_t(1) << 30;  // all strings built in the render, summed (quadratic growth)
  size_t steps = size_t(1) << 20;        // loop iterations, macro calls, list items made or compared
};

// The budget of the render running on this thread, for as long as this object lives.
class RenderBudget {
 public:
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

 private:
  friend void charge_string(size_t written, size_t size);
  friend void check_string_size(size_t size);
  friend void check_list_size(size_t items);
  friend void charge_steps(size_t steps);

  RenderLimits limits_;
  size_t built_bytes_ = 0;
  size_t steps_ = 0;
  RenderBudget* enclosing_;
};

// Each throws Error naming the bound that a value of this size would pass. Every string value
// and list a render makes is charged where it is made (Value's constructors); the rest is
// charged where the work is done.
void check_string_size(size_t size);              // a string about to hold `size` bytes
void charge_string(size_t written, size_t size);  // `written` bytes built, into a string now `size` long
void check_list_size(size_t items);               // a list about to hold `items` items
// Loop iterations, macro calls, list items made, items compared (in, unique, sort), containers
// walked by the cycle check.
void charge_steps(size_t steps);

}  // namespace mlaserve::jinja
