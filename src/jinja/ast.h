// The parsed form of a template: one Node type whose fields each kind uses as listed.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "jinja/value.h"

namespace mlaserve::jinja {

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    // Statements.
    Text,         // name: the text
    Output,       // {{ children[0] }}
    If,           // children[0]: test; body; alternate (an elif is one If there)
    For,          // children: target (Name or Tuple of Names), iterable, [condition]; body; alternate (else)
    Set,          // children: target (Name, Tuple of Names or Attribute), [value]; body when a block set
    Macro,        // name; children: parameters (Name, or KeywordArgument for a default); body
    CallBlock,    // children[0]: the Call; children[1..]: caller's parameters; body
    FilterBlock,  // children[0]: a Filter whose operand (children[0]) is null; body
    With,         // children: Name, value, Name, value...; body
    Break,
    Continue,
    Nothing,  // {% generation %} and comments
    // Expressions.
    Literal,          // value
    Name,             // name
    List,             // children: items
    Tuple,            // children: items
    Dict,             // children: key, value, key, value...
    Attribute,        // children[0].name
    Index,            // children[0][children[1]]
    Slice,            // children[0][start:stop:step], children[1..3] null where absent
    Call,             // children[0](children[1..]); arguments may be KeywordArguments
    KeywordArgument,  // name=children[0]
    Filter,           // children[0] | name(children[1..])
    Test,             // children[0] is [not: negate] name(children[1..])
    Unary,            // name: not | - | +; children[0]
    Binary,           // name: the operator; children[0], children[1]
    Ternary,          // children[1] if children[0] else children[2]
    Select,           // children[0] if children[1] (no else: undefined when false)
  };
  Kind kind;
  int line = 0;
  std::string name;
  Value value;
  bool negate = false;
  NodeList children, body, alternate;

  Node(Kind node_kind, int source_line) : kind(node_kind), line(source_line) {}
};

// Parses a template as Jinja2 does with transformers' settings (lstrip_blocks and trim_blocks on,
// one trailing newline dropped); throws Error naming the line of anything it cannot parse, and of any filter
// or test it does not implement.
NodeList parse_template(std::string_view source);

// The filters and tests the renderer implements (template.cc).
bool known_filter(std::string_view name);
bool known_test(std::string_view name);

}  // namespace mlaserve::jinja
