#include "jinja/budget.h"

#include "base/error.h"

namespace mlaserve::jinja {
namespace {

thread_local RenderBudget* current_budget = nullptr;
const RenderLimits kDefaultLimits;

}  // namespace

RenderBudget::RenderBudget(const RenderLimits& limits) : limits_(limits), enclosing_(current_budget) {
  current_budget = this;
}

RenderBudget::~RenderBudget() { current_budget = enclosing_; }

void check_string_size(size_t size) {
  const size_t limit = current_budget ? current_budget->limits_.string_bytes : kDefaultLimits.string_bytes;
  MLA_CHECK(size <= limit, "the template builds a string of more than {} bytes", limit);
}

void charge_string(size_t written, size_t size) {
  check_string_size(size);
  if (!current_budget) return;
  current_budget->built_bytes_ += written;
  MLA_CHECK(current_budget->built_bytes_ <= current_budget->limits_.built_bytes,
            "the template builds more than {} bytes of strings in one render", current_budget->limits_.built_bytes);
}

void check_list_size(size_t items) {
  const size_t limit = current_budget ? current_budget->limits_.list_items : kDefaultLimits.list_items;
  MLA_CHECK(items <= limit, "the template builds a list of more than {} items", limit);
}

void charge_steps(size_t steps) {
  if (!current_budget) return;
  current_budget->steps_ += steps;
  MLA_CHECK(current_budget->steps_ <= current_budget->limits_.steps,
            "the template takes more than {} steps (loop iterations, macro calls, list items made or compared) "
            "in one render",
            current_budget->limits_.steps);
}

}  // namespace mlaserve::jinja
