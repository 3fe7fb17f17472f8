#include "jinja/template.h"

#include <algorithm>
#include <unordered_map>

#include "base/error.h"
#include "jinja/budget.h"
#include "jinja/builtins.h"

namespace mlaserve::jinja {
namespace {

using Kind = Node::Kind;

struct Scope {
  std::unordered_map<std::string, Value> variables;
  std::shared_ptr<Scope> parent;

  Value lookup(const std::string& name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent.get()) {
      const auto found = scope->variables.find(name);
      if (found != scope->variables.end()) return found->second;
    }
    return Value();
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto scope = std::make_shared<Scope>();
  scope->parent = parent;
  return scope;
}

enum class Flow { Normal, Break, Continue };

// Whether statements read a name (a macro reads varargs or kwargs).
bool reads_name(const NodeList& nodes, std::string_view name) {
  for (const NodePtr& node : nodes) {
    if (!node) continue;
    if (node->kind == Node::Kind::Name && node->name == name) return true;
    if (reads_name(node->children, name) || reads_name(node->body, name) || reads_name(node->alternate, name))
      return true;
  }
  return false;
}

void emit(std::string& out, const std::string& text) {
  charge_string(text.size(), out.size() + text.size());
  out += text;
}

// An Error from a place that did not know its line gets the line of the node it reached.
[[noreturn]] void rethrow_at(const Node& node, const Error& error) {
  const std::string message = error.what();
  if (message.rfind("chat template line ", 0) == 0) throw error;
  throw Error(fmt::format("chat template line {}: {}", node.line, message));
}

class Renderer {
 public:
  Flow render(const NodeList& statements, const ScopePtr& scope, std::string& out) {
    for (const NodePtr& statement : statements) {
      Flow flow = Flow::Normal;
      try {
        flow = render_statement(*statement, scope, out);
      } catch (const Error& error) {
        rethrow_at(*statement, error);
      }
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Value eval(const Node& node, const ScopePtr& scope);

 private:
  Flow render_statement(const Node& node, const ScopePtr& scope, std::string& out);
  Flow render_for(const Node& node, const ScopePtr& scope, std::string& out);
  void assign(const Node& target, const Value& value, const ScopePtr& scope);
  void define_macro(const Node& node, const ScopePtr& scope);
  Value call_block(const Node& node, const ScopePtr& scope);
  Arguments arguments(const NodeList& nodes, size_t first, const ScopePtr& scope);
  Value binary(const Node& node, const ScopePtr& scope);
  Value subscript(const Node& node, const ScopePtr& scope);
  Value slice(const Node& node, const ScopePtr& scope);

  std::string render_to_string(const NodeList& statements, const ScopePtr& scope) {
    std::string out;
    render(statements, scope, out);
    return out;
  }

  // Macros calling macros (recursion included) past this depth are an error, not a stack overflow.
  static constexpr int kMaxMacroDepth = 100;
  int macro_depth_ = 0;
};

Flow Renderer::render_statement(const Node& node, const ScopePtr& scope, std::string& out) {
  switch (node.kind) {
    case Kind::Text: emit(out, node.name); break;
    case Kind::Output: emit(out, eval(*node.children[0], scope).str()); break;
    case Kind::If: return render(eval(*node.children[0], scope).truthy() ? node.body : node.alternate, scope, out);
    case Kind::For: return render_for(node, scope, out);
    case Kind::Set:
      assign(*node.children[0],
             node.children.size() > 1 ? eval(*node.children[1], scope) : Value(render_to_string(node.body, scope)),
             scope);
      break;
    case Kind::Macro: define_macro(node, scope); break;
    case Kind::CallBlock: emit(out, call_block(node, scope).str()); break;
    case Kind::FilterBlock: {
      const Node& filter = *node.children[0];
      emit(out,
           apply_filter(filter.name, Value(render_to_string(node.body, scope)), arguments(filter.children, 1, scope))
               .str());
      break;
    }
    case Kind::With: {
      const ScopePtr inner = child_of(scope);
      for (size_t i = 0; i + 1 < node.children.size(); i += 2)
        inner->variables[node.children[i]->name] = eval(*node.children[i + 1], scope);
      return render(node.body, inner, out);
    }
    case Kind::Break: return Flow::Break;
    case Kind::Continue: return Flow::Continue;
    case Kind::Nothing: break;
    default: emit(out, eval(node, scope).str());
  }
  return Flow::Normal;
}

// As Jinja2: a dict iterates over its keys, a string over its characters, an undefined value
// over nothing; the else block renders when no iteration ran to its end.
Flow Renderer::render_for(const Node& node, const ScopePtr& scope, std::string& out) {
  const ScopePtr loop_scope = child_of(scope);
  const Value iterable = eval(*node.children[1], loop_scope);
  Array candidates;
  if (iterable.is_array()) {
    candidates = iterable.items();
  } else if (iterable.has_attributes()) {
    for (const auto& entry : iterable.attributes().entries) candidates.emplace_back(entry.first);
  } else if (iterable.is_string()) {
    check_list_size(utf8_length(iterable.as_string()));
    for (std::string& character : utf8_characters(iterable.as_string())) candidates.emplace_back(std::move(character));
  } else if (!iterable.is_undefined()) {
    fail("cannot loop over {}", iterable.type_name());
  }
  Array items;
  for (const Value& candidate : candidates) {
    if (node.children.size() > 2) {
      const ScopePtr test_scope = child_of(loop_scope);
      assign(*node.children[0], candidate, test_scope);
      if (!eval(*node.children[2], test_scope).truthy()) continue;
    }
    items.push_back(candidate);
  }
  bool completed_none = true;
  for (size_t i = 0; i < items.size(); ++i) {
    charge_steps(1);
    Object loop;
    const auto n = int64_t(items.size()), index = int64_t(i);
    loop.set("index", Value(index + 1));
    loop.set("index0", Value(index));
    loop.set("revindex", Value(n - index));
    loop.set("revindex0", Value(n - index - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i + 1 == items.size()));
    loop.set("length", Value(n));
    loop.set("previtem", i > 0 ? items[i - 1] : Value());
    loop.set("nextitem", i + 1 < items.size() ? items[i + 1] : Value());
    loop.set("depth", Value(int64_t(1)));
    loop.set("depth0", Value(int64_t(0)));
    loop.set("cycle", Value::function([i](const Arguments& args) {
               MLA_CHECK(!args.positional.empty(), "loop.cycle needs at least one value");
               return args.positional[i % args.positional.size()];
             }));
    loop_scope->variables["loop"] = Value::object(std::move(loop));
    assign(*node.children[0], items[i], loop_scope);
    const Flow flow = render(node.body, loop_scope, out);
    if (flow == Flow::Break) break;
    if (flow == Flow::Continue) continue;
    completed_none = false;
  }
  if (completed_none) return render(node.alternate, loop_scope, out);
  return Flow::Normal;
}

void Renderer::assign(const Node& target, const Value& value, const ScopePtr& scope) {
  if (target.kind == Kind::Name) {
    scope->variables[target.name] = value;
  } else if (target.kind == Kind::Tuple) {
    MLA_CHECK(value.is_array(), "cannot unpack {} into {} names", value.type_name(), target.children.size());
    MLA_CHECK(value.items().size() == target.children.size(), "cannot unpack {} items into {} names",
              value.items().size(), target.children.size());
    for (size_t i = 0; i < target.children.size(); ++i) scope->variables[target.children[i]->name] = value.items()[i];
  } else {
    const Value object = eval(*target.children[0], scope);
    MLA_CHECK(object.kind() == Value::Kind::Namespace, "cannot set attribute '{}' of {}: only a namespace() takes them",
              target.name, object.type_name());
    MLA_CHECK(!value.reaches(object), "cannot set attribute '{}' of a namespace to a value holding that namespace",
              target.name);
    object.attributes().set(target.name, value);
  }
}

// A macro is a function of its parameters rendering its body in a scope below the one it was
// defined in; a {% call %} block passes itself as the keyword argument `caller`.
// The macro holds its scope weakly: the scope holds the macro, and a strong reference back would
// keep both (and every value in the scope) alive after the render.
void Renderer::define_macro(const Node& node, const ScopePtr& scope) {
  scope->variables[node.name] = Value::function([this, &node,
                                                 weak_scope = std::weak_ptr(scope)](const Arguments& args) {
    const ScopePtr defined_in = weak_scope.lock();
    MLA_CHECK(defined_in, "macro '{}' is called after the block that defines it has ended", node.name);
    MLA_CHECK(macro_depth_ < kMaxMacroDepth, "macro '{}': calls nested more than {} deep", node.name, kMaxMacroDepth);
    charge_steps(1);
    ++macro_depth_;
    const struct Leave {
      int& depth;
      ~Leave() { --depth; }
    } leave{macro_depth_};
    const ScopePtr body_scope = child_of(defined_in);
    // As Jinja2: extra positional arguments are `varargs`, unknown keywords `kwargs`, for a
    // macro whose body reads them; otherwise an error.
    const bool takes_varargs = reads_name(node.body, "varargs"), takes_kwargs = reads_name(node.body, "kwargs");
    MLA_CHECK(takes_varargs || args.positional.size() <= node.children.size(),
              "macro '{}' takes at most {} arguments, got {}", node.name, node.children.size(), args.positional.size());
    Array varargs;
    for (size_t i = node.children.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    Object kwargs;
    for (const auto& [key, value] : args.keywords) {
      const bool known = key == "caller" || std::any_of(node.children.begin(), node.children.end(),
                                                        [&key = key](const NodePtr& p) { return p->name == key; });
      MLA_CHECK(known || takes_kwargs, "macro '{}' has no parameter '{}'", node.name, key);
      if (!known) kwargs.set(key, value);
      if (key == "caller") body_scope->variables["caller"] = value;
    }
    if (takes_varargs) body_scope->variables["varargs"] = Value::tuple(std::move(varargs));
    if (takes_kwargs) body_scope->variables["kwargs"] = Value::object(std::move(kwargs));
    std::vector<const Node*> defaults;
    for (size_t i = 0; i < node.children.size(); ++i) {
      const Node& parameter = *node.children[i];
      const Value* given = args.get(i, parameter.name);
      body_scope->variables[parameter.name] = given ? *given : Value();
      if (!given && parameter.kind == Kind::KeywordArgument) defaults.push_back(&parameter);
    }
    for (const Node* parameter : defaults)
      body_scope->variables[parameter->name] = eval(*parameter->children[0], body_scope);
    return Value(render_to_string(node.body, body_scope));
  });
}

Value Renderer::call_block(const Node& node, const ScopePtr& scope) {
  const Node& call = *node.children[0];
  Value caller = Value::function([this, &node, scope](const Arguments& args) {
    charge_steps(1);
    const ScopePtr body_scope = child_of(scope);
    for (size_t i = 1; i < node.children.size(); ++i) {
      const Node& parameter = *node.children[i];
      const Value* given = args.get(i - 1, parameter.name);
      body_scope->variables[parameter.name] = given ? *given
                                              : parameter.kind == Kind::KeywordArgument
                                                  ? eval(*parameter.children[0], body_scope)
                                                  : Value();
    }
    return Value(render_to_string(node.body, body_scope));
  });
  const Value callee = eval(*call.children[0], scope);
  MLA_CHECK(callee.kind() == Value::Kind::Callable, "{{% call %}} needs a macro, got {}", callee.type_name());
  Arguments args = arguments(call.children, 1, scope);
  args.keywords.emplace_back("caller", std::move(caller));
  return callee.function()(args);
}

Arguments Renderer::arguments(const NodeList& nodes, size_t first, const ScopePtr& scope) {
  Arguments args;
  for (size_t i = first; i < nodes.size(); ++i) {
    if (nodes[i]->kind == Kind::KeywordArgument)
      args.keywords.emplace_back(nodes[i]->name, eval(*nodes[i]->children[0], scope));
    else
      args.positional.push_back(eval(*nodes[i], scope));
  }
  return args;
}

Value Renderer::eval(const Node& node, const ScopePtr& scope) {
  switch (node.kind) {
    case Kind::Literal: return node.value;
    case Kind::Name: return scope->lookup(node.name);
    case Kind::List:
    case Kind::Tuple: {
      Array items;
      for (const NodePtr& item : node.children) items.push_back(eval(*item, scope));
      return node.kind == Kind::Tuple ? Value::tuple(std::move(items)) : Value::array(std::move(items));
    }
    case Kind::Dict: {
      Object object;
      for (size_t i = 0; i + 1 < node.children.size(); i += 2) {
        const Value key = eval(*node.children[i], scope);
        MLA_CHECK(key.is_string(), "dict keys must be strings, got {}", key.type_name());
        object.set(key.as_string(), eval(*node.children[i + 1], scope));
      }
      return Value::object(std::move(object));
    }
    case Kind::Attribute: {
      const Value object = eval(*node.children[0], scope);
      MLA_CHECK(!object.is_undefined(), "cannot read attribute '{}' of an undefined value", node.name);
      return get_attribute(object, node.name);
    }
    case Kind::Index: return subscript(node, scope);
    case Kind::Slice: return slice(node, scope);
    case Kind::Call: {
      const Value callee = eval(*node.children[0], scope);
      MLA_CHECK(callee.kind() == Value::Kind::Callable, "cannot call {}", callee.type_name());
      return callee.function()(arguments(node.children, 1, scope));
    }
    case Kind::Filter:
      return apply_filter(node.name, eval(*node.children[0], scope), arguments(node.children, 1, scope));
    case Kind::Test: {
      const bool result = run_test(node.name, eval(*node.children[0], scope), arguments(node.children, 1, scope));
      return Value(result != node.negate);
    }
    case Kind::Unary: {
      const Value operand = eval(*node.children[0], scope);
      if (node.name == "not") return Value(!operand.truthy());
      MLA_CHECK(operand.is_number() || operand.kind() == Value::Kind::Bool, "cannot apply unary {} to {}", node.name,
                operand.type_name());
      if (operand.kind() == Value::Kind::Float)
        return Value(node.name == "-" ? -operand.as_number() : operand.as_number());
      const int64_t integer = operand.kind() == Value::Kind::Bool ? int64_t(operand.as_bool()) : operand.as_int();
      if (node.name == "+") return Value(integer);
      int64_t negated = 0;
      MLA_CHECK(!__builtin_sub_overflow(int64_t(0), integer, &negated), "integer overflow in -({})", integer);
      return Value(negated);
    }
    case Kind::Binary: return binary(node, scope);
    case Kind::Ternary: return eval(*node.children[eval(*node.children[0], scope).truthy() ? 1 : 2], scope);
    case Kind::Select: return eval(*node.children[1], scope).truthy() ? eval(*node.children[0], scope) : Value();
    default: fail("a statement where an expression was expected");
  }
}

Value Renderer::subscript(const Node& node, const ScopePtr& scope) {
  const Value object = eval(*node.children[0], scope);
  const Value key = eval(*node.children[1], scope);
  MLA_CHECK(!object.is_undefined(), "cannot index an undefined value");
  if (key.is_string()) return get_attribute(object, key.as_string());
  MLA_CHECK(key.kind() == Value::Kind::Int, "cannot index {} with {}", object.type_name(), key.type_name());
  return get_item(object, key.as_int());
}

Value Renderer::slice(const Node& node, const ScopePtr& scope) {
  const Value object = eval(*node.children[0], scope);
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    if (!node.children[size_t(i) + 1]) continue;
    const Value bound = eval(*node.children[size_t(i) + 1], scope);
    if (bound.is_undefined() || bound.is_none()) continue;
    MLA_CHECK(bound.kind() == Value::Kind::Int, "slice bounds must be integers, got {}", bound.type_name());
    bounds[i] = bound.as_int();
    given[i] = true;
  }
  return slice_value(object, given[0] ? &bounds[0] : nullptr, given[1] ? &bounds[1] : nullptr, bounds[2]);
}

Value Renderer::binary(const Node& node, const ScopePtr& scope) {
  const std::string& op = node.name;
  const Value left = eval(*node.children[0], scope);
  if (op == "and") return left.truthy() ? eval(*node.children[1], scope) : left;
  if (op == "or") return left.truthy() ? left : eval(*node.children[1], scope);
  return binary_operation(op, left, eval(*node.children[1], scope));
}

}  // namespace

Template::Template(std::string_view source) : program_(parse_template(source)) {}

std::string Template::render(const Object& variables, const RenderLimits& limits) const {
  const RenderBudget budget(limits);
  auto globals = std::make_shared<Scope>();
  for (auto& [name, value] : global_functions().entries) globals->variables[name] = value;
  for (const auto& [name, value] : variables.entries) globals->variables[name] = value;
  Renderer renderer;
  std::string out;
  renderer.render(program_, globals, out);
  return out;
}

}  // namespace mlaserve::jinja
