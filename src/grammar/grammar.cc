#include "grammar/grammar.h"

#include <algorithm>

#include "base/error.h"
#include "grammar/matcher.h"

namespace mlaserve::grammar {

int32_t GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  defined_.push_back(false);
  return int32_t(rules_.size() - 1);
}

void GrammarBuilder::define(int32_t rule, std::vector<Sequence> alternatives) {
  rules_[size_t(rule)] = std::move(alternatives);
  defined_[size_t(rule)] = true;
}

int32_t GrammarBuilder::rule(std::string name, std::vector<Sequence> alternatives) {
  const int32_t id = declare(std::move(name));
  define(id, std::move(alternatives));
  return id;
}

Item GrammarBuilder::byte(uint8_t value) {
  Item item;
  item.bytes.set(value);
  return item;
}

Item GrammarBuilder::range(uint8_t low, uint8_t high) {
  Item item;
  for (int value = low; value <= high; ++value) item.bytes.set(size_t(value));
  return item;
}

Item GrammarBuilder::ref(int32_t rule) {
  Item item;
  item.rule = rule;
  return item;
}

Sequence GrammarBuilder::literal(std::string_view text) {
  Sequence out;
  for (char c : text) out.push_back(byte(uint8_t(c)));
  return out;
}

Sequence GrammarBuilder::join(std::initializer_list<Sequence> parts) {
  Sequence out;
  for (const auto& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::vector<Sequence> GrammarBuilder::utf8_character(const ByteSet& ascii) {
  Item plain;
  plain.bytes = ascii;
  for (int value = 0x80; value < 0x100; ++value) plain.bytes.reset(size_t(value));
  const Item tail = range(0x80, 0xbf);
  Item e1_ec_ee_ef = range(0xe1, 0xef);
  e1_ec_ee_ef.bytes.reset(0xed);
  return {{plain},
          {range(0xc2, 0xdf), tail},
          {byte(0xe0), range(0xa0, 0xbf), tail},
          {e1_ec_ee_ef, tail, tail},
          {byte(0xed), range(0x80, 0x9f), tail},
          {byte(0xf0), range(0x90, 0xbf), tail, tail},
          {range(0xf1, 0xf3), tail, tail, tail},
          {byte(0xf4), range(0x80, 0x8f), tail, tail}};
}

std::string special_token_spelling(std::string_view content) {
  std::string spelling(1, '\xff');
  spelling.append(content);
  return spelling;
}

std::string token_spelling(std::string_view text, bool special) {
  if (special) return special_token_spelling(text);
  return text.find('\xff') == std::string_view::npos ? std::string(text) : std::string();
}

// min copies of body, then either a right-recursive tail (unbounded) or a chain of nested
// optional copies: tail_k ::= body tail_(k-1) | empty.
int32_t GrammarBuilder::repeat(const std::string& name, const Sequence& body, int min, int max) {
  Sequence required;
  for (int i = 0; i < min; ++i) required.insert(required.end(), body.begin(), body.end());
  int32_t tail = -1;
  if (max < 0) {
    tail = declare(name + "-tail");
    define(tail, {join({body, {ref(tail)}}), {}});
  } else {
    for (int k = 0; k < max - min; ++k) {
      Sequence more = body;
      if (tail >= 0) more.push_back(ref(tail));
      tail = rule(name + "-upto" + std::to_string(k + 1), {more, {}});
    }
  }
  if (tail >= 0) required.push_back(ref(tail));
  return rule(name, {required});
}

namespace {

// Which rules can match the empty string: those with an alternative of such rules only.
std::vector<bool> nullable_rules(const std::vector<std::vector<Sequence>>& rules) {
  std::vector<bool> nullable(rules.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t rule = 0; rule < rules.size(); ++rule) {
      if (nullable[rule]) continue;
      for (const Sequence& sequence : rules[rule])
        if (std::all_of(sequence.begin(), sequence.end(),
                        [&](const Item& item) { return item.rule >= 0 && nullable[size_t(item.rule)]; }))
          nullable[rule] = changed = true;
    }
  }
  return nullable;
}

// Throws Error naming a rule that reaches itself without consuming a byte (left recursion,
// direct or through rules that match the empty string), which no matcher could expand.
void check_no_empty_cycles(const std::vector<std::vector<Sequence>>& rules, const std::vector<std::string>& names) {
  const std::vector<bool> nullable = nullable_rules(rules);
  std::vector<std::vector<int32_t>> leading(rules.size());  // rules reached before any byte
  for (size_t rule = 0; rule < rules.size(); ++rule)
    for (const Sequence& sequence : rules[rule])
      for (const Item& item : sequence) {
        if (item.rule < 0) break;
        leading[rule].push_back(item.rule);
        if (!nullable[size_t(item.rule)]) break;
      }
  enum : uint8_t { kUnseen, kOnPath, kDone };
  std::vector<uint8_t> state(rules.size(), kUnseen);
  std::vector<std::pair<int32_t, size_t>> path;  // depth-first, without recursion
  for (size_t start = 0; start < rules.size(); ++start) {
    if (state[start] != kUnseen) continue;
    path.emplace_back(int32_t(start), 0);
    state[start] = kOnPath;
    while (!path.empty()) {
      auto& [rule, next] = path.back();
      if (next == leading[size_t(rule)].size()) {
        state[size_t(rule)] = kDone;
        path.pop_back();
        continue;
      }
      const int32_t child = leading[size_t(rule)][next++];
      MLA_CHECK(state[size_t(child)] != kOnPath, "grammar rule '{}' reaches itself without consuming a byte",
                names[size_t(child)]);
      if (state[size_t(child)] == kUnseen) {
        state[size_t(child)] = kOnPath;
        path.emplace_back(child, 0);
      }
    }
  }
}

}  // namespace

Grammar GrammarBuilder::build(int32_t root) && {
  Grammar grammar;
  grammar.root = root;
  grammar.masks = std::make_shared<MaskCache>();
  grammar.names = names_;
  grammar.alternatives.resize(rules_.size());
  for (size_t rule = 0; rule < rules_.size(); ++rule)
    MLA_CHECK(defined_[rule], "grammar rule '{}' is used but never defined", names_[rule]);
  check_no_empty_cycles(rules_, names_);
  for (size_t rule = 0; rule < rules_.size(); ++rule) {
    for (const Sequence& sequence : rules_[rule]) {
      grammar.alternatives[rule].push_back(int32_t(grammar.elements.size()));
      for (const Item& item : sequence) {
        Element element;
        element.kind = item.rule >= 0 ? Element::Kind::Rule : Element::Kind::Bytes;
        element.rule = item.rule;
        element.bytes = item.bytes;
        grammar.elements.push_back(element);
      }
      grammar.elements.push_back(Element{});  // End
    }
  }
  return grammar;
}

Grammar choice_grammar(const std::vector<std::string>& choices, const std::optional<ThinkingFirst>& thinking) {
  MLA_CHECK(!choices.empty(), "a choice grammar needs at least one choice");
  GrammarBuilder builder;
  std::vector<Sequence> alternatives;
  for (const auto& choice : choices) alternatives.push_back(GrammarBuilder::literal(choice));
  const int32_t choice = builder.rule("choice", std::move(alternatives));
  return std::move(builder).build(thinking ? thinking_then(builder, choice, *thinking) : choice);
}

// A state per matched prefix of `forbidden` (Knuth-Morris-Pratt): each byte leads to the state of
// the longest prefix the text then ends with; the byte that would complete it is not allowed.
int32_t GrammarBuilder::text_without(const std::string& name, std::string_view forbidden) {
  const size_t length = forbidden.size();
  std::vector<size_t> border(length, 0);
  for (size_t i = 1, k = 0; i < length; ++i) {
    while (k > 0 && forbidden[i] != forbidden[k]) k = border[k - 1];
    if (forbidden[i] == forbidden[k]) ++k;
    border[i] = k;
  }
  auto next = [&](size_t state, char byte) {
    while (state > 0 && forbidden[state] != byte) state = border[state - 1];
    return forbidden[state] == byte ? state + 1 : state;
  };
  std::vector<int32_t> states(length);
  for (size_t k = 0; k < length; ++k) states[k] = declare(name + " " + std::to_string(k));
  for (size_t k = 0; k < length; ++k) {
    std::vector<ByteSet> to(length);
    for (int b = 0; b < 0xff; ++b) {
      const size_t j = next(k, char(b));
      if (j < length) to[j].set(size_t(b));
    }
    std::vector<Sequence> options = {{}};
    for (size_t j = 0; j < length; ++j)
      if (to[j].any()) options.push_back({Item{to[j], -1}, ref(states[j])});
    define(states[k], std::move(options));
  }
  return states[0];
}

int32_t thinking_then(GrammarBuilder& builder, int32_t document, const ThinkingFirst& thinking) {
  Item space;
  for (char c : std::string_view(" \t\r\n")) space.bytes.set(uint8_t(c));
  const Sequence reasoning =
      GrammarBuilder::join({{GrammarBuilder::ref(builder.text_without("reasoning", thinking.close))},
                            GrammarBuilder::literal(thinking.close),
                            {GrammarBuilder::ref(builder.repeat("after reasoning", {space}, 0, 4))}});
  if (thinking.opened_in_prompt)
    return builder.rule("thinking first", {GrammarBuilder::join({reasoning, {GrammarBuilder::ref(document)}})});
  const int32_t block =
      builder.optional("reasoning block", GrammarBuilder::join({GrammarBuilder::literal(thinking.open), reasoning}));
  return builder.rule("thinking first", {{GrammarBuilder::ref(block), GrammarBuilder::ref(document)}});
}

}  // namespace mlaserve::grammar
