// GrammarBuilder::build's checks: a rule that reaches itself before any byte (directly, or
// through rules that can match nothing) is refused by name; recursion after a byte is kept.
#include "grammar/grammar.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace mlaserve::grammar {
namespace {

using B = GrammarBuilder;

// The message of the Error build throws for `root` ("" when it builds).
std::string build_error(GrammarBuilder builder, int32_t root) {
  try {
    std::move(builder).build(root);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(GrammarBuilder, RefusesARuleThatReachesItselfBeforeAByte) {
  {  // expr ::= expr "+" "1" | "1"
    GrammarBuilder builder;
    const int32_t expr = builder.declare("expr");
    builder.define(expr, {B::join({{B::ref(expr)}, B::literal("+1")}), B::literal("1")});
    EXPECT_NE(build_error(builder, expr).find("rule 'expr' reaches itself"), std::string::npos);
  }
  {  // list ::= maybe list "x" | "y", maybe ::= "b" | (nothing): the cycle passes an empty match
    GrammarBuilder builder;
    const int32_t list = builder.declare("list");
    const int32_t maybe = builder.rule("maybe", {B::literal("b"), {}});
    builder.define(list, {B::join({{B::ref(maybe), B::ref(list)}, B::literal("x")}), B::literal("y")});
    EXPECT_NE(build_error(builder, list).find("reaches itself without consuming a byte"), std::string::npos);
  }
  {  // a ::= b, b ::= c | "z", c ::= a: a longer cycle, whichever rule it is found at
    GrammarBuilder builder;
    const int32_t a = builder.declare("a"), b = builder.declare("b"), c = builder.declare("c");
    builder.define(a, {{B::ref(b)}});
    builder.define(b, {{B::ref(c)}, B::literal("z")});
    builder.define(c, {{B::ref(a)}});
    EXPECT_NE(build_error(builder, a).find("reaches itself"), std::string::npos);
  }
}

TEST(GrammarBuilder, KeepsRecursionAfterAByte) {
  GrammarBuilder builder;
  const int32_t value = builder.declare("value");
  const int32_t items = builder.repeat("items", {B::ref(value)}, 0, -1);  // items-tail ::= value items-tail | (nothing)
  builder.define(value, {B::join({B::literal("["), {B::ref(items)}, B::literal("]")}), B::literal("0")});
  const int32_t maybe = builder.rule("maybe", {B::literal("-"), {}});
  const int32_t root = builder.rule("root", {{B::ref(maybe), B::ref(maybe), B::ref(value)}});  // nullable, acyclic
  EXPECT_EQ(build_error(builder, root), "");
}

}  // namespace
}  // namespace mlaserve::grammar
