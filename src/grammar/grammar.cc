#include "grammar/grammar.h"

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

Grammar GrammarBuilder::build(int32_t root) && {
  Grammar grammar;
  grammar.root = root;
  grammar.masks = std::make_shared<MaskCache>();
  grammar.names = names_;
  grammar.alternatives.resize(rules_.size());
  for (size_t rule = 0; rule < rules_.size(); ++rule) {
    MLA_CHECK(defined_[rule], "grammar rule '{}' is used but never defined", names_[rule]);
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

Grammar choice_grammar(const std::vector<std::string>& choices) {
  MLA_CHECK(!choices.empty(), "a choice grammar needs at least one choice");
  GrammarBuilder builder;
  std::vector<Sequence> alternatives;
  for (const auto& choice : choices) alternatives.push_back(GrammarBuilder::literal(choice));
  return std::move(builder).build(builder.rule("choice", std::move(alternatives)));
}

}  // namespace mlaserve::grammar
