"""mlaserve's Jinja interpreter against Jinja2 itself (Debian's python3-jinja2, set up as
transformers sets it up for chat templates: a sandboxed environment with trim_blocks,
lstrip_blocks, loop controls, tojson writing non-ASCII as it is, raise_exception, strftime_now):
a generated corpus of expressions, filters, tests and statements, and the published chat
templates of tests/data/chat_templates over the conversations of conversations.json, each
rendered by both.
Outputs must be equal byte for byte, and where Jinja2 raises, mlaserve must raise too. A case
mlaserve refuses on purpose is listed in REFUSED with the reason (docs/serving.md lists them too).
Run by CTest: compare_with_jinja2.py JINJA_RENDER WORK_DIR."""
import itertools
from datetime import datetime
import json
import os
import subprocess
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

# What mlaserve does not render as Jinja2 does, on purpose: the reason for each.
REFUSED = {
    "expr 100000000000000000000": "integers are 64-bit",
    "expr xs|random is number": "no random filter: a chat prompt renders the same every time",
    "stmt {{ lipsum is defined }}": "no lipsum global",
    "stmt {{ cycler is defined }}": "no cycler global",
    "stmt {{ s|e }}{% autoescape true %}{{ '<a>' }}{% endautoescape %}": "no autoescape: prompts are not HTML",
    "stmt {% for x in xs recursive %}{{ x }}{% endfor %}": "no recursive loops",
    "combo xs|reverse": "reverse gives a list, where Jinja2 gives an iterator that prints as its address",
    "combo words|reverse": "reverse gives a list, where Jinja2 gives an iterator that prints as its address",
    "combo d|reverse": "reverse gives a list, where Jinja2 gives an iterator that prints as its address",
    "combo nested|reverse": "reverse gives a list, where Jinja2 gives an iterator that prints as its address",
    "combo unicode|upper": "upper, lower, title and capitalize change ASCII letters only",
}


def environment():
    """transformers' _compile_jinja_template: the same options, filters and globals."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


CONTEXT = {
    "n": 7, "m": -3, "x": 2.5, "zero": 0, "s": "Hello, World", "empty": "", "sp": "  padded  ", "t": True, "f": False,
    "none": None, "xs": [3, 1, 2], "words": ["b", "a", "c", "a"], "nested": [[1, 2], [3]], "d": {"b": 2, "a": 1},
    "users": [{"name": "ann", "age": 31, "admin": True}, {"name": "bob", "age": 25, "admin": False},
              {"name": "cy", "age": 40}],
    "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <b>"},
                 {"role": "assistant", "content": "Hello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
                 {"role": "user", "content": [{"type": "text", "text": "part"}]}],
    "unicode": "héllo ✓ 世界", "quote": "a \"q\" and 'r'\n\tend",
}

EXPRESSIONS = [
    # literals and arithmetic
    "1 + 2 * 3", "7 // 2", "-7 // 2", "7 % 3", "-7 % 3", "2 ** 10", "7 / 2", "1.5 + 1", "10 / 4", "3 - 5", "0.1 + 0.2",
    "n * x", "n / zero", "'ab' * 3", "3 * 'ab'", "'a' ~ 1 ~ none ~ t", "'a' + 'b'", "[1] + [2, 3]", "xs * 2",
    "-n", "+n", "not t", "not none", "t and f", "t or f", "none or 'x'", "0 or ''", "'a' and 'b'", "1 < 2 < 3",
    "3 > 2 > 2", "n == 7", "n != 7.0", "'a' < 'b'", "[1, 2] == [1, 2]", "d == {'a': 1, 'b': 2}", "1 in xs", "'ell' in s",
    "'z' not in s", "'a' in d", "none is none", "n if t else m", "n if f", "(1, 2)", "(1,)", "()", "[]", "{}",
    "{'k': [1, {'j': none}]}", "true", "True", "false", "None", "none", "1e3", "1_000", "0x10", "'\\n'", '"\\u00e9"',
    "'it''s'", "\"a\" 'b'", "1.0", "-0.0", "1 / 3", "2.0 * 3", "100000000000000000000", "3.14159265358979",
    # attributes, subscripts, slices
    "users[0].name", "users[1]['age']", "d.a", "d['b']", "d.missing", "xs[-1]", "xs[1:]", "xs[::-1]", "s[7:]",
    "s[:-3]", "s[::2]", "words[1:3]", "xs[10]", "users[5]", "nested[0][1]", "s[0]", "s[-1]", "unicode[1:3]",
    "messages[2].tool_calls[0].function.arguments.a", "users|map(attribute='name')|list",
    # string methods
    "s.upper()", "s.lower()", "s.title()", "s.capitalize()", "sp.strip()", "sp.lstrip()", "sp.rstrip()",
    "s.split(', ')", "s.split()", "'a,b,,c'.split(',')", "s.startswith('He')", "s.endswith('x')", "s.replace('l', 'L')",
    "s.replace('l', 'L', 1)", "s.find('o')", "s.count('l')", "'{} and {}'.format(1, 2)", "s.strip('Hd')",
    "'-'.join(words)", "s.isdigit()", "'42'.isdigit()", "s.isalpha()", "'  '.isspace()", "s.islower()",
    "'x'.center(5)", "'ab'.zfill(4)", "s.swapcase()", "s.rsplit(',', 1)", "s.splitlines()", "quote.splitlines()",
    "s.partition(', ')", "'%s-%d' % ('a', 3)", "s.index('W')", "'abc'.lstrip('a')",
    # dict and list methods
    "d.items()|list", "d.keys()|list", "d.values()|list", "d.get('a')", "d.get('z', 9)", "d.get('z')",
    "xs.index(2)", "xs.count(1)", "users[0].items()|list",
    # filters
    "xs|length", "s|length", "d|length", "xs|count", "xs|first", "xs|last", "xs|sum", "xs|min", "xs|max", "xs|sort",
    "xs|sort(reverse=true)", "words|unique|list", "words|reverse|list", "s|reverse", "xs|join(',')", "words|join",
    "s|upper", "s|lower", "s|title", "s|capitalize", "sp|trim", "s|replace('World', 'there')", "none|default('d')",
    "empty|default('d')", "empty|default('d', true)", "d.zz|default(1)", "n|string", "'12'|int", "'x'|int",
    "'3.5'|float", "x|int", "n|float", "x|round", "2.567|round(2)", "-x|abs", "xs|list", "s|list", "d|list",
    "d|dictsort", "d|items|list", "users|selectattr('admin')|map(attribute='name')|list",
    "users|rejectattr('admin')|map(attribute='name')|list", "users|selectattr('age', 'gt', 30)|list|length",
    "users|map(attribute='age')|max", "users|sort(attribute='age')|map(attribute='name')|join(' ')",
    "users|groupby('admin')|list|length", "words|map('upper')|list", "xs|map('string')|join('+')",
    "xs|select('odd')|list", "xs|reject('odd')|list", "d|tojson", "users|tojson", "unicode|tojson", "quote|tojson",
    "xs|tojson(indent=2)", "none|tojson", "x|tojson", "s|truncate(8)", "s|wordcount", "'a\nb'|indent(2)",
    "'a\nb'|indent(2, true)", "s|center(20)", "'<&>'|e", "'<&>'|escape", "'%d'|format(5)", "words|batch(3)|list",
    "xs|slice(2)|list", "s|urlencode", "'ab'|safe", "xs|random is number", "'  a  b '|striptags",
    "words|unique|sort|list", "nested|sum(start=[])", "'Hello'|first", "users|first|attr('name')",
    "{'b': 1, 'a': 2}|dictsort(reverse=true)", "xs|sort|first", "d|items|map('last')|list",
    # tests
    "n is defined", "nope is defined", "nope is undefined", "none is none", "n is number", "s is string", "d is mapping",
    "xs is iterable", "s is iterable", "n is odd", "n is even", "n is divisibleby 7", "n is eq 7", "n is ne 7",
    "n is lt 8", "n is gt 8", "n is ge 7", "n is le 6", "t is true", "f is false", "t is boolean", "n is integer",
    "x is float", "xs is sequence", "users[0] is mapping", "s is lower", "'abc' is lower", "'ABC' is upper",
    "n is sameas 7", "1 is in xs", "'a' is in words", "d is callable", "s.upper is callable", "none is string",
    "xs is not string", "nope is not defined",
    # undefined behaviour
    "nope", "nope|length", "nope ~ 'x'", "nope.attr", "nope is none", "d.missing is defined", "users[0].missing",
    "nope + 1", "'%s' % nope", "nope|default('x')", "[nope]|length",
    # filter arguments
    "words|batch(3, 'x')|list", "xs|slice(2, 0)|list", "range(7)|slice(3)|list", "range(7)|batch(2)|list",
    "d|urlencode", "[('a b', 'c&d'), ('e', 1)]|urlencode", "'a/b c?'|urlencode", "'<!-- c --><p>x &amp; y</p>'|striptags",
    "'the quick brown fox'|truncate(9)", "'the quick brown fox'|truncate(9, true)", "'the quick brown fox'|truncate(12, leeway=0)",
    "'the quick brown fox'|truncate(9, end='>')", "3.14159|round(3)", "2.5|round", "3.5|round", "-2.5|round",
    "2.675|round(2)", "7.1|round(method='ceil')", "7.9|round(0, 'floor')", "1234.5|round(-2)", "'0x1f'|int(base=16)",
    "'1_000'|int", "' 42 '|int", "'3.9'|int", "'abc'|int(5)", "'1e3'|float", "'inf'|float", "t|int", "none|float(1.5)",
    "words|min", "words|max", "['B', 'a']|min", "['B', 'a']|min(case_sensitive=true)", "users|max(attribute='age')",
    "users|min(attribute='name')", "[]|min", "users|sum(attribute='age')", "xs|sum(start=10)", "[[2, 1], [1, 5]]|sort",
    "['b', 'A', 'a', 'B']|unique|list", "['b', 'A', 'a']|unique(case_sensitive=true)|list", "users|map(attribute='role', default='-')|list",
    "xs|map('string')|map('length')|list", "users|selectattr('admin', 'false')|list|length", "users|selectattr('admin', 'defined')|list|length",
    "users|rejectattr('age', 'lt', 30)|map(attribute='name')|join", "xs|select('gt', 1)|list", "xs|select|list",
    "[0, 1, '', 'a', none]|select|list", "xs|reject('in', [1, 2])|list", "users|join(', ', attribute='name')",
    "'%s and %s'|format('a', 'b')", "'%(a)s'|format(a=1)", "'x'|center(6)", "s|wordcount", "'a-b c(d'|title",
    "n is divisibleby 2", "x is divisibleby 0.5", "n is lessthan 8", "n is greaterthan 8", "'upper' is filter",
    "'odd' is test", "'nope' is filter", "none is sameas none", "1 is sameas true", "n is escaped", "nope is iterable",
    "'ab' is ne 'ab'", "xs|first is odd", "users|map(attribute='age')|select('even')|list",
]

STATEMENTS = [
    "{% for u in users %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
    "{{ loop.revindex }}{{ loop.revindex0 }} {% endfor %}",
    "{% for u in users if u.admin is defined %}{{ u.name }}{% else %}none{% endfor %}",
    "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}",
    "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}",
    "{% for x in xs %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 2 %}{% break %}{% endif %}{% endfor %}",
    "{% for x in xs %}{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.cycle('a', 'b') }} {% endfor %}",
    "{% for row in nested %}{% for c in row %}{{ loop.depth }}{{ loop.depth0 }}{{ c }}{% endfor %};{% endfor %}",
    "{% set a = 1 %}{% set b = a + 1 %}{{ a }}{{ b }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}",
    "{% set ns = namespace(total=0, names=[]) %}{% for u in users %}{% set ns.total = ns.total + u.age %}{% endfor %}{{ ns.total }}",
    "{% set x = 1 %}{% for i in xs %}{% set x = i %}{% endfor %}{{ x }}",
    "{% set block %}Hello {{ s }}{% endset %}[{{ block }}]",
    "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}",
    "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('ann') }} {{ greet('bob', '?') }} {{ greet(name='cy') }}",
    "{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
    "{% macro wrap() %}[{{ caller() }}]{% endmacro %}{% call wrap() %}inside{% endcall %}",
    "{% filter upper %}shout {{ s }}{% endfilter %}",
    "{{ 'a' }}  {#- comment -#}  {{ 'b' }}",
    "  {%- if t %} yes {% endif -%}  ",
    "{% if t %}\n  line\n{% endif %}\nafter",
    "    {% for x in xs %}\n    {{ x }}\n    {% endfor %}\n",
    "{%+ if t %}kept{% endif %}",
    "{% raw %}{{ not rendered }}{% endraw %}",
    "{{ raise_exception('stop here') }}",
    "{% for m in messages %}{{ m.role }}: {% if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}\n{% endfor %}",
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments|tojson }}){% endfor %}{% endif %}{% endfor %}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    "{{ messages[0]['content'] if messages[0]['role'] == 'system' else '' }}",
    "{% set loop_messages = messages[1:] %}{{ loop_messages|length }}",
    "{% for x in range(3) %}{{ x }}{% endfor %}{{ range(2, 8, 3)|list }}",
    "{{ dict(a=1, b=2)|tojson }}", "{{ lipsum is defined }}", "{{ cycler is defined }}",
    "{% set x = [1, 2] %}{{ x.append(3) }}{{ x }}",
    "{% set d2 = {'a': 1} %}{% set _ = d2.update({'b': 2}) %}{{ d2 }}",
    "{{ s|e }}{% autoescape true %}{{ '<a>' }}{% endautoescape %}",
    "{% with a = 5 %}{{ a }}{% endwith %}{{ a is defined }}",
    "{% for x in xs recursive %}{{ x }}{% endfor %}",
    "{% for i in range(2) %}{% for j in range(2) %}{{ i }}{{ j }}{{ loop.index }}{% endfor %}{{ loop.index }} {% endfor %}",
    "{{ strftime_now is defined }}",
    "{% if not messages %}none{% elif messages|length > 3 %}many{% endif %}",
    "{{ '%s=%s' % ('a', 1) }}{{ '%05.1f' % x }}",
    "{{ (xs|sort)[0] }}{{ (d|dictsort)[0][0] }}",
    "{{ users|map(attribute='name')|select('equalto', 'bob')|list }}",
    "{{ [1, 2, 3]|map('int')|sum }}",
    "{{ 'a' if t }}|{{ 'a' if f }}|",
    "{% for x in xs %}{{ x }}{{ ',' if not loop.last }}{% endfor %}",
    "{{ 'x' ~ n|string ~ 'y' }}",
    "{% set comma = joiner(' | ') %}{% for x in xs %}{{ comma() }}{{ x }}{% endfor %}",
    "{% set sep = joiner() %}{{ sep() }}{{ sep() }}{{ sep() }}",
    "{{ dict(d, c=3)|tojson }}", "{{ dict()|length }}", "{{ strftime_now('%Y') }}",
    "{{ n|string|length }}{{ -1|abs }}",
    "{{ s.split(',')[0]|trim|lower }}",
    "{{ messages[-1]['content'][0]['text']|upper }}",
]


def cases():
    out = []
    for expression in EXPRESSIONS:
        out.append(("expr " + expression, "{{ " + expression + " }}"))
    for statement in STATEMENTS:
        out.append(("stmt " + statement, statement))
    # Combinations: every filter of a set applied to every value of a set.
    values = ["n", "x", "s", "empty", "xs", "words", "d", "none", "t", "unicode", "nested"]
    filters = ["length", "string", "list", "first", "last", "tojson", "upper", "trim", "int", "float", "sort", "reverse",
               "unique|list", "join(',')", "default('D')", "abs", "round", "capitalize", "title", "items|list", "sum"]
    for value, name in itertools.product(values, filters):
        out.append((f"combo {value}|{name}", "{{ " + value + "|" + name + " }}"))
    tests = ["defined", "none", "string", "number", "mapping", "iterable", "sequence", "true", "false", "boolean",
             "integer", "float", "odd", "even", "lower", "upper"]
    for value, name in itertools.product(values, tests):
        out.append((f"combo {value} is {name}", "{{ " + value + " is " + name + " }}"))
    return out


def template_cases():
    """Each published template over each conversation, with and without tools, a generation
    prompt and thinking, as compare_with_reference.js renders them."""
    here = os.path.dirname(os.path.abspath(__file__))
    directory = os.path.join(here, "..", "data", "chat_templates")
    data = json.load(open(os.path.join(here, "conversations.json")))
    out = []
    for file in sorted(f for f in os.listdir(directory) if f.endswith(".jinja")):
        source = open(os.path.join(directory, file)).read()
        deepseek = file.startswith("deepseek")
        conversations = dict(data["conversations"], **data["multi_part"])
        for (name, messages), tools, prompt, thinking in itertools.product(
                conversations.items(), [False, True], [False, True], [None, True, False]):
            context = {"messages": messages, "add_generation_prompt": prompt,
                       "bos_token": "<｜begin▁of▁sentence｜>" if deepseek else "[BOS]",
                       "eos_token": "<｜end▁of▁sentence｜>" if deepseek else "[EOS]"}
            if tools:
                context["tools"] = data["tools"]
            if thinking is not None:
                context["thinking"] = context["enable_thinking"] = thinking
            out.append((f"template {file} / {name} / tools={tools} / prompt={prompt} / thinking={thinking}", source, context))
    return out


def jinja2_render(env, source, context=CONTEXT):
    try:
        return {"output": env.from_string(source).render(**context)}
    except Exception as error:  # Jinja2's errors, the sandbox's, and Python's own in a method call
        return {"error": f"{type(error).__name__}: {error}"}


def main():
    renderer, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    env = environment()
    corpus = [(name, source, CONTEXT) for name, source in cases()] + template_cases()
    cases_path, out_path = os.path.join(work, "jinja2_cases.json"), os.path.join(work, "jinja2_out.json")
    json.dump([{"template": source, "context": context} for _, source, context in corpus], open(cases_path, "w"))
    subprocess.run([renderer, cases_path, out_path], check=True)
    ours = json.load(open(out_path))
    differ, refused_as_listed, raised = [], 0, 0
    for (name, source, context), got in zip(corpus, ours):
        want = jinja2_render(env, source, context)
        raised += "error" in want
        same = ("error" in want and "error" in got) or (want.get("output") == got.get("output") and "output" in got)
        if name in REFUSED:
            refused_as_listed += 1
            if same:
                differ.append(f"{name!r}: listed as refused but now renders as Jinja2 ({REFUSED[name]})")
            continue
        if not same:
            differ.append(f"{name!r}: jinja2 {json.dumps(want, ensure_ascii=False)} mlaserve {json.dumps(got, ensure_ascii=False)}")
    print(f"{len(corpus)} cases: {len(corpus) - len(differ) - refused_as_listed} as Jinja2 ({raised} of them errors in both), "
          f"{refused_as_listed} refused on purpose, {len(differ)} different")
    for line in differ:
        print("DIFFERENT " + line)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
