// Jinja templates as Hugging Face checkpoints ship them for chat (tokenizer_config.json's
// chat_template), rendered as @huggingface/jinja renders them: the subset real chat templates
// use (if/elif/else, for with loop and else, set and block set, namespace(), macros with
// defaults and call blocks, break/continue, filters, tests, string/dict/list methods,
// raise_exception). What it does not implement is an error at construction naming the line.
#pragma once
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/budget.h"
#include "jinja/value.h"

namespace mlaserve::jinja {

class Template {
 public:
  explicit Template(std::string_view source);  // throws Error naming the line
  // The variables are the template's globals (messages, tools, add_generation_prompt, ...).
  // Throws Error naming the line of a runtime failure, the template's raise_exception, or the
  // bound of `limits` that the render would pass.
  std::string render(const Object& variables, const RenderLimits& limits = {}) const;

 private:
  NodeList program_;
};

}  // namespace mlaserve::jinja
