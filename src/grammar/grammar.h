// Context-free grammars over bytes, as constrained decoding uses them: rules of alternatives,
// each a sequence of byte sets and rule references. Built in code (GrammarBuilder) from a JSON
// schema, for any JSON object, or for a list of choices; matched by grammar/matcher.h.
#pragma once
#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlaserve::grammar {

class MaskCache;
using ByteSet = std::bitset<256>;

struct Element {
  enum class Kind : uint8_t { Bytes, Rule, End };
  Kind kind = Kind::End;
  int32_t rule = -1;  // Kind::Rule
  ByteSet bytes;      // Kind::Bytes
};

// Every alternative is a run of elements in `elements` ending with an End element; rules list
// the starts of their alternatives. No rule may reach itself without consuming a byte.
struct Grammar {
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> alternatives;  // per rule
  std::vector<std::string> names;                  // per rule, for errors and dumps
  int32_t root = -1;
  // The token masks of the states and stack tops seen so far, shared by every request with this grammar.
  std::shared_ptr<MaskCache> masks;
};

// One item of a sequence: a byte set or a rule.
struct Item {
  ByteSet bytes;
  int32_t rule = -1;
};
using Sequence = std::vector<Item>;

class GrammarBuilder {
 public:
  int32_t declare(std::string name);  // a rule to define later (for recursion)
  void define(int32_t rule, std::vector<Sequence> alternatives);
  int32_t rule(std::string name, std::vector<Sequence> alternatives);

  static Item byte(uint8_t value);
  static Item range(uint8_t low, uint8_t high);
  static Item ref(int32_t rule);
  static Sequence literal(std::string_view text);
  // Sequence concatenation.
  static Sequence join(std::initializer_list<Sequence> parts);
  // One UTF-8 character as RFC 3629 defines it (no overlong forms, no surrogates, nothing past
  // U+10FFFF): one of the `ascii` bytes, or a multi-byte sequence.
  static std::vector<Sequence> utf8_character(const ByteSet& ascii);
  // Any bytes (but 0xFF, which spells special tokens) that do not hold `forbidden`.
  int32_t text_without(const std::string& name, std::string_view forbidden);
  // body repeated min..max times (max < 0: unbounded). body must consume at least one byte.
  int32_t repeat(const std::string& name, const Sequence& body, int min, int max);
  int32_t optional(const std::string& name, const Sequence& body) { return repeat(name, body, 0, 1); }

  // Throws Error naming a rule left undefined.
  Grammar build(int32_t root) &&;

 private:
  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<bool> defined_;
};

// A special token as grammars spell it: 0xFF, a byte no UTF-8 text holds, then its text; so a
// grammar can ask for the token itself and never for ordinary tokens that merely spell its text.
std::string special_token_spelling(std::string_view content);
// A token as the vocabulary a matcher walks spells it (engine.cc): a special token as above; an
// ordinary token that holds 0xFF (a byte-level piece no UTF-8 text holds) as nothing, so that no
// run of ordinary tokens spells a special token.
std::string token_spelling(std::string_view text, bool special);

// A thinking model's reasoning before the document, as vLLM lets it reason first: `open` (unless
// the prompt opened it), text without `close`, `close` and up to 4 whitespace bytes; all of it
// optional unless the prompt opened it.
struct ThinkingFirst {
  bool opened_in_prompt = false;
  std::string open = "<think>", close = "</think>";
};
int32_t thinking_then(GrammarBuilder& builder, int32_t document, const ThinkingFirst& thinking);

// Exactly one of `choices` (vLLM's guided_choice); throws Error when there is none.
Grammar choice_grammar(const std::vector<std::string>& choices,
                       const std::optional<ThinkingFirst>& thinking = std::nullopt);

}  // namespace mlaserve::grammar
