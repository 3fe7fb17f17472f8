// Jinja templates as Hugging Face checkpoints ship them for chat (tokenizer_config.json's
// chat_template), rendered as @huggingface/jinja renders them: the subset real chat templates
// use (if/elif/else, for with loop and else, set and block set, namespace(), macros with
// defaults and call blocks, break/continue, filters, tests, string/dict/list methods,
// raise_exception). What it does not implement is an error at construction naming the line.
#pragma once
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace mlaserve::jinja {

class Template {
 public:
  explicit Template(std::string_view source);  // throws Error naming the line
  // The variables are the template's globals (messages, tools, add_generation_prompt, ...).
  // Throws Error naming the line of a runtime failure, or the template's raise_exception.
  std::string render(const Object& variables) const;

 private:
  NodeList program_;
};

}  // namespace mlaserve::jinja
