// The Jinja interpreter on constructs the published chat templates use, each against the
// text Jinja's rules give; the templates themselves are compared with @huggingface/jinja
// in run_reference_templates.sh.
#include "jinja/template.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace mlaserve::jinja {
namespace {

std::string render(std::string_view source, const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  return Template(source).render(from_json(context).attributes());
}

// The message of the Error `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Jinja, WhitespaceControlAndBlockTrimming) {
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("{% if true %}\nx\n{% endif %}\ny"), "x\ny");  // trim_blocks
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");          // lstrip_blocks
  EXPECT_EQ(render("a {# note #}\nb"), "a b");
  EXPECT_EQ(render("  {{ 'k' }}"), "  k");  // expressions keep their indentation
  EXPECT_EQ(render("end\n"), "end");        // one trailing newline dropped
}

TEST(Jinja, LoopVariablesElseAndFilteredLoops) {
  const auto context = nlohmann::ordered_json{{"xs", {"a", "b", "c"}}};
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{{ ',' if not loop.last }}{% endfor %}", context),
            "1a,2b,3c");
  EXPECT_EQ(render("{% for x in xs if x != 'b' %}{{ loop.index0 }}{{ loop.length }}{% endfor %}", context), "0212");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 'b' %}{% break %}{% endif %}{{ x }}{% endfor %}", context), "a");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for i in range(5, -1, -2) %}{{ i }}{% endfor %}"), "531");
}

TEST(Jinja, SetScopesAndNamespaces) {
  // A set inside a loop stays in the loop; a namespace's attribute carries out of it.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}in {{ 'side' }}{% endset %}[{{ block }}]"), "[in side]");
}

TEST(Jinja, MacrosDefaultsAndCallBlocks) {
  EXPECT_EQ(render("{% macro tag(name, open='<', close='>') %}{{ open }}{{ name }}{{ close }}{% endmacro %}"
                   "{{ tag('a') }}{{ tag('b', close=']') }}"),
            "<a><b]");
  EXPECT_EQ(render("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}"), "[inside]");
}

// A macro lives in the scope it is defined in; a render frees both (the fuzzer found every render
// of a template with a macro, Kimi K2 Thinking's among them, keeping its variables alive).
TEST(Jinja, ARenderWithMacrosFreesItsVariables) {
  auto sentinel = std::make_shared<int>(0);
  const std::weak_ptr<int> watch = sentinel;
  Object variables;
  variables.set("probe", Value::function([held = std::move(sentinel)](const Arguments&) { return Value("p"); }));
  EXPECT_EQ(Template("{% macro m(x) %}[{{ x }}{{ probe() }}]{% endmacro %}{% for i in [1] %}{% macro n() %}"
                     "{{ m(i) }}{% endmacro %}{{ n() }}{% endfor %}")
                .render(variables),
            "[1p]");
  variables = Object();
  EXPECT_TRUE(watch.expired()) << "the render's scopes are still alive";
  EXPECT_TRUE(error_of([] {
                render(
                    "{% set ns = namespace(f=none) %}{% for i in [1] %}{% macro inner() %}x{% endmacro %}"
                    "{% set ns.f = inner %}{% endfor %}{{ ns.f() }}");
              }).find("after the block that defines it has ended") != std::string::npos);
}

// Nesting and recursion past the limits are errors naming them, not stack overflows.
// {{ ((…(1)…)) }} with `depth` brackets.
std::string bracketed(size_t depth) {
  std::string source = "{{ ";
  source.append(depth, '(').append("1").append(depth, ')').append(" }}");
  return source;
}

TEST(Jinja, DeepNestingAndRunawayRecursionAreErrors) {
  EXPECT_EQ(render(bracketed(50)), "1");
  EXPECT_TRUE(error_of([] { render(bracketed(100000)); }).find("nested more than 200 levels") != std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_TRUE(error_of([&] { render(blocks); }).find("nested more than 200 levels") != std::string::npos);
  EXPECT_TRUE(error_of([] {
                render("{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}");
              }).find("calls nested more than 100 deep") != std::string::npos);
  EXPECT_EQ(
      render("{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}"),
      "543210");
}

TEST(Jinja, NumberLiteralsOutOfRangeAreErrors) {
  EXPECT_EQ(render("{{ 9223372036854775807 }}"), "9223372036854775807");
  EXPECT_TRUE(error_of([] { render("{{ 99999999999999999999 }}"); }).find("not a 64-bit integer") != std::string::npos);
}

// Python's arithmetic: floor division and a remainder with the divisor's sign; division by
// zero and integers beyond int64 are errors, never undefined behaviour (the fuzzer's
// "{{8//0}}" cast an infinity to int64).
TEST(Jinja, ArithmeticAsPythonWithErrorsForZeroAndOverflow) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 % 3 }}"), "3 -4 -4 2 -2 1");
  EXPECT_EQ(render("{{ -7.5 % 2 }} {{ 2 ** 10 }}"), "0.5 1024");
  for (const char* zero : {"{{ 8 // 0 }}", "{{ 8 / 0 }}", "{{ 8 % 0 }}", "{{ 8.0 % 0 }}", "{{ 8.0 // 0.0 }}"})
    EXPECT_TRUE(error_of([&] { render(zero); }).find("division by zero") != std::string::npos) << zero;
  for (const char* big : {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                          "{{ 4611686018427387904 * 2 }}", "{{ 2 ** 64 }}"})
    EXPECT_TRUE(error_of([&] { render(big); }).find("out of range") != std::string::npos ||
                error_of([&] { render(big); }).find("overflow") != std::string::npos)
        << big;
}

// A namespace that would hold itself is an error: the reference cycle would never be freed (the
// fuzzer's "{% set ns.n = ns %}" leaked every render). Lists cannot change (Jinja2's sandbox).
TEST(Jinja, ValuesCannotHoldThemselves) {
  EXPECT_TRUE(error_of([] { render("{% set ns = namespace(n=0) %}{% set ns.n = ns %}"); }).find("holding") !=
              std::string::npos);
  EXPECT_TRUE(error_of([] { render("{% set ns = namespace(n=0) %}{% set ns.n = [1, [ns]] %}"); }).find("holding") !=
              std::string::npos);
  EXPECT_TRUE(error_of([] { render("{% set l = [] %}{{ l.append([l]) }}"); }).find("unsafe") != std::string::npos);
  EXPECT_EQ(render("{% set a = namespace(x=1) %}{% set b = namespace(a=a) %}{% set a.x = 2 %}{{ b.a.x }}"), "2");
}

std::string render_within(std::string_view source, const RenderLimits& limits) {
  return Template(source).render(Object{}, limits);
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// The fuzzer's template: a namespace storing its own JSON, quotes escaped again, more than
// doubles per message, so 25 passes reached gigabytes. The default bounds stop it.
TEST(Jinja, ANamespaceStoringItsOwnJsonStopsAtTheStringBound) {
  const auto context = nlohmann::ordered_json{{"messages", std::vector<int>(40, 0)}};
  const std::string message = error_of([&] {
    render("{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns|tojson %}{% endfor %}{{ ns.n }}",
           context);
  });
  EXPECT_TRUE(contains(message, "a string of more than 33554432 bytes")) << message;
  EXPECT_TRUE(contains(message, "chat template line 1")) << message;
}

// Each bound lets a render reach it and fails the step past it.
TEST(Jinja, EachRenderBoundIsAnErrorOnlyPastIt) {
  RenderLimits limits;
  limits.string_bytes = 8;
  EXPECT_EQ(render_within("{{ 'abcd' ~ 'efgh' }}", limits), "abcdefgh");
  EXPECT_TRUE(contains(error_of([&] { render_within("{{ 'abcd' ~ 'efghi' }}", limits); }), "more than 8 bytes"));
  EXPECT_TRUE(contains(error_of([&] { render_within("abcd{{ 'efghi' }}", limits); }), "more than 8 bytes"));
  EXPECT_TRUE(contains(error_of([&] { render_within("{{ [1, 22, 333]|tojson }}", limits); }), "more than 8 bytes"));
  // Lists sharing one list: a tojson of 2^60 copies, from 60 small lists.
  EXPECT_TRUE(contains(error_of([] {
                         render(
                             "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}"
                             "{% endfor %}{{ ns.l|tojson }}");
                       }),
                       "a string of more than"));

  limits = RenderLimits();
  limits.list_items = 4;
  EXPECT_EQ(render_within("{{ [1, 2] + [3, 4] }}", limits), "[1, 2, 3, 4]");
  EXPECT_TRUE(contains(error_of([&] { render_within("{{ [1, 2] + [3, 4, 5] }}", limits); }), "list of more than 4"));
  EXPECT_TRUE(contains(error_of([&] { render_within("{{ range(5) }}", limits); }), "list of more than 4"));
  EXPECT_TRUE(contains(error_of([&] { render_within("{{ 'a b c d e'.split() }}", limits); }), "list of more than 4"));
  EXPECT_TRUE(
      contains(error_of([&] { render_within("{% for c in 'abcde' %}{% endfor %}", limits); }), "list of more than 4"));

  limits = RenderLimits();
  limits.built_bytes = 100;  // building 'x' * n one character at a time copies n^2 / 2 bytes
  EXPECT_EQ(
      render_within("{% set ns = namespace(s='') %}{% for i in range(12) %}{% set ns.s = ns.s ~ 'x' %}{% endfor %}"
                    "{{ ns.s|length }}",
                    limits),
      "12");
  EXPECT_TRUE(contains(error_of([&] {
                         render_within(
                             "{% set ns = namespace(s='') %}{% for i in range(20) %}{% set ns.s = ns.s ~ 'x' %}"
                             "{% endfor %}",
                             limits);
                       }),
                       "more than 100 bytes of strings in one render"));

  limits = RenderLimits();
  limits.steps = 200;  // range(10) and its 10 passes, each with range(9) and its 9 passes
  EXPECT_EQ(render_within("{% for i in range(10) %}{% for j in range(9) %}{% endfor %}{% endfor %}", limits), "");
  EXPECT_TRUE(contains(error_of([&] {
                         render_within("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}",
                                       limits);
                       }),
                       "more than 200 steps"));
  EXPECT_TRUE(contains(error_of([&] {
                         render_within(
                             "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                             "{{ f(60) }}",
                             limits);
                       }),
                       "more than 200 steps"));
}

// Lists nested deep, or sharing lists 2^60 ways, are walked, printed and freed without a
// recursion per level (which overflowed the stack).
TEST(Jinja, DeepAndSharedValuesNeitherRecurseNorBlowUp) {
  const std::string chain =  // each pass nests the list one level deeper
      "{% set ns = namespace(l=[]) %}{% for i in range(1200) %}{% set ns.l = [ns.l] %}{% endfor %}";
  RenderLimits enough;
  enough.steps = size_t(4) << 20;
  EXPECT_EQ(render_within(chain + "{{ ns.l|length }}", enough), "1");
  EXPECT_TRUE(
      contains(error_of([&] { render_within(chain + "{{ ns.l|tojson }}", enough); }), "nests deeper than 1000 levels"));
  EXPECT_TRUE(contains(error_of([&] { render_within(chain + "{% set ns.m = [ns.l, ns] %}", enough); }),
                       "holding that namespace"));
  const std::string shared =
      "{% set ns = namespace(l=[1]) %}{% for i in range(60) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}";
  EXPECT_TRUE(contains(error_of([&] { render(shared + "{% set ns.m = [ns.l, ns] %}"); }), "holding that namespace"));
  // Nesting a value in itself each pass walks it each pass: quadratic, so it spends steps.
  RenderLimits limits;
  limits.steps = 10000;
  EXPECT_TRUE(contains(error_of([&] {
                         render_within(
                             "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
                             "{% endfor %}",
                             limits);
                       }),
                       "more than 10000 steps"));
}

// Work that grows faster than what it builds is charged too: items compared by in, unique and
// sort; long patterns are searched in linear time (string find's worst case is the product of
// the lengths: 4 MiB of 'a' searched for 2 MiB of 'a' and a 'b' took hours).
TEST(Jinja, ComparisonsAndSearchesStayWithinTheBudget) {
  RenderLimits limits;
  limits.steps = 1000;
  EXPECT_EQ(render_within("{{ range(20)|unique|length }} {{ 7 in range(20) }} {{ range(20)|sort|first }}", limits),
            "20 True 0");
  for (const char* quadratic :
       {"{{ range(200)|unique|length }}", "{% for i in range(30) %}{{ i in range(30) }}{% endfor %}",
        "{{ range(500)|sort|length }}"})
    EXPECT_TRUE(contains(error_of([&] { render_within(quadratic, limits); }), "more than 1000 steps")) << quadratic;
  const std::string text =  // ns.a: 2^22 'a's; ns.p: 2^21 'a's and a 'b'
      "{% set ns = namespace(a='a') %}{% for i in range(22) %}{% set ns.a = ns.a ~ ns.a %}{% endfor %}"
      "{% set ns.p = ns.a[:2097152] ~ 'b' %}";
  EXPECT_EQ(render(text + "{{ ns.p in ns.a }} {{ ns.a.find(ns.p) }} {{ ns.a.replace(ns.p, '') == ns.a }}"
                          "{{ ns.a.split(ns.p)|length }}"),
            "False -1 True1");
  EXPECT_EQ(render(text + "{% set long = ns.a[:100] ~ 'b' ~ ns.a[:100] %}{{ ('xy' ~ long ~ 'z').find(long) }} "
                          "{{ long in ('xy' ~ long) }} {{ ('1' ~ long ~ '2' ~ long ~ '3').split(long)|join(',') }}"),
            "2 True 1,2,3");
}

// Ranges, slices and int() at the ends of int64 as Python gives them, or an error: never an
// overflow.
TEST(Jinja, RangesSlicesAndIntAtTheEndsOfInt64) {
  EXPECT_EQ(render("{{ range(-9223372036854775807, 9223372036854775807, 4611686018427387904) }}"),
            "[-9223372036854775807, -4611686018427387903, 1, 4611686018427387905]");
  EXPECT_EQ(render("{{ range(5, -9223372036854775807, -9223372036854775807) }}"), "[5, -9223372036854775802]");
  EXPECT_EQ(render("{{ range(3, 0, -1) }} {{ range(0) }} {{ range(2, 9, 3) }}"), "[3, 2, 1] [] [2, 5, 8]");
  EXPECT_EQ(render("{{ 'abc'[1::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"), "b [3]");
  EXPECT_EQ(render("{{ 'h\u00e9llo'[1:3] }} {{ 'h\u00e9llo'[1] }} {{ 'h\u00e9llo'[::-2] }}"), "\u00e9l \u00e9 olh");
  EXPECT_EQ(render("{{ -9223372036854775807 }} {{ -(-9223372036854775807) }} {{ -true }} {{ +false }} {{ -1.5 }}"),
            "-9223372036854775807 9223372036854775807 -1 0 -1.5");
  EXPECT_TRUE(contains(error_of([] { render("{{ -(-9223372036854775807 - 1) }}"); }), "overflow"));
  EXPECT_TRUE(contains(error_of([] { render("{{ '99999999999999999999'|int }}"); }), "out of range"));
  EXPECT_TRUE(contains(error_of([] { render("{{ (10.0 ** 30)|int }}"); }), "out of range"));
  EXPECT_TRUE(contains(error_of([] { render("{{ [[1]]|tojson(indent=-1) }}"); }), "must not be negative"));
}

TEST(Jinja, FiltersTestsAndMethods) {
  const auto context = nlohmann::ordered_json{{"d", {{"b", 2}, {"a", "x\u00e9"}}}, {"s", "  Hi there  "}};
  EXPECT_EQ(render("{{ d | tojson }}", context), "{\"b\": 2, \"a\": \"x\u00e9\"}");
  EXPECT_EQ(render("{{ d | tojson(ensure_ascii=true) }}", context), "{\"b\": 2, \"a\": \"x\\u00e9\"}");
  EXPECT_EQ(render("{{ d | tojson(indent=2) }}", context), "{\n  \"b\": 2,\n  \"a\": \"x\u00e9\"\n}");
  EXPECT_EQ(render("{{ [1.5, 2.0, none, true] | tojson }}"), "[1.5, 2.0, null, true]");
  EXPECT_EQ(render("{{ s | trim }}|{{ s.strip().upper() }}|{{ s | length }}", context), "Hi there|HI THERE|12");
  EXPECT_EQ(render("{{ 'a,b,c'.split(',', 1) | tojson }}"), "[\"a\", \"b,c\"]");
  EXPECT_EQ(render("{{ 'x</think>y'.split('</think>')[-1] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][1:] | join('-') }}"),
            "ycba2-3");
  EXPECT_EQ(render("{{ d.get('c', 'none') }}{{ d.get('b') }}{{ d | dictsort | first | first }}", context), "none2a");
  EXPECT_EQ(
      render("{{ x is defined }}{{ none is none }}{{ 3 is integer }}{{ d is mapping }}{{ 'a' is string }}", context),
      "FalseTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ missing | default('fallback') }}{{ 7 // 2 }}{{ 7 / 2 }}{{ 2 ** 3 }}{{ 1.0 }}"),
            "fallback33.581.0");
  EXPECT_EQ(render("{{ 'ab' ~ 1 ~ none | string }}{{ 'b' in 'abc' }}{{ 'z' not in ['z'] }}"), "ab1NoneTrueFalse");
}

TEST(Jinja, UnsupportedConstructsNameTheirLineAtParse) {
  EXPECT_NE(
      error_of([] { Template("line one\n{{ x | frobnicate }}"); }).find("line 2: unsupported filter 'frobnicate'"),
      std::string::npos);
  EXPECT_NE(error_of([] { Template("\n\n{% include 'other' %}"); }).find("line 3: unsupported statement 'include'"),
            std::string::npos);
  EXPECT_NE(error_of([] { Template("{% if x %}never closed"); }).find("'if' is never closed"), std::string::npos);
  EXPECT_NE(error_of([] { Template("{{ x is prime }}"); }).find("unsupported test 'prime'"), std::string::npos);
}

TEST(Jinja, RuntimeErrorsNameTheirLine) {
  EXPECT_NE(error_of([] {
              render("ok\n{{ raise_exception('Conversation roles must alternate') }}");
            }).find("line 2: the template raised an exception: Conversation roles must alternate"),
            std::string::npos);
  EXPECT_NE(error_of([] { render("\n{% for x in 5 %}{% endfor %}"); }).find("line 2: cannot loop over integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { render("{{ 1 + none }}"); }).find("line 1:"), std::string::npos);
}

TEST(Jinja, NumbersPrintAsPythonPrintsThem) {
  EXPECT_EQ(python_float(0.1), "0.1");
  EXPECT_EQ(python_float(1e21), "1e+21");
  EXPECT_EQ(python_float(1.5e-7), "1.5e-07");
  EXPECT_EQ(python_float(123456789012.5), "123456789012.5");
  EXPECT_EQ(python_float(-0.000001), "-1e-06");
  EXPECT_EQ(python_float(1e16), "1e+16");
  EXPECT_EQ(python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(render("{{ 2.5 }} {{ -0.0 }} {{ 10 / 4 }} {{ 3 * 1.0 }}"), "2.5 -0.0 2.5 3.0");
}

}  // namespace
}  // namespace mlaserve::jinja
