// Constrained decoding's cost per token at a Kimi-sized vocabulary: the token mask of a JSON
// schema's grammar at the states a document passes through, computed afresh (a state not seen
// before) on a vocabulary that has seen no grammar or has seen others, and from the cache, and
// over a whole document (what a request pays per token on average); building the trie.
// The vocabulary is make-model's byte-level BPE of 163,840 tokens (Kimi K2's size), or a real
// checkpoint's with MLASERVE_BENCH_TOKENIZER=DIR (e.g. DeepSeek-V3's tokenizer.json).
//   build/bench/grammar_mask_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"
#include "tools/tokenizer_trainer.h"

namespace mlaserve {
namespace {

constexpr int64_t kVocabulary = 163840;

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> loaded = [] {
    std::string dir = std::getenv("MLASERVE_BENCH_TOKENIZER") ? std::getenv("MLASERVE_BENCH_TOKENIZER") : "";
    if (dir.empty()) {
      dir = (std::filesystem::temp_directory_path() / "mlaserve_grammar_bench").string();
      std::filesystem::create_directories(dir);
      write_tokenizer_files(dir, kVocabulary);
    }
    return Tokenizer::load(dir);
  }();
  return *loaded;
}

std::vector<std::string> token_bytes() {
  static const std::vector<std::string> bytes = [] {
    int64_t size = 0;
    for (int32_t id = 0; id < (1 << 18); ++id)  // the highest id with bytes ends the vocabulary
      if (!tokenizer().decode(std::span(&id, 1), false).empty()) size = std::max<int64_t>(size, id + 1);
    std::vector<std::string> out(static_cast<size_t>(size));
    for (int32_t id = 0; id < int32_t(size); ++id)
      if (!tokenizer().is_special(id)) out[size_t(id)] = tokenizer().decode(std::span(&id, 1), false);
    return out;
  }();
  return bytes;
}

std::shared_ptr<const grammar::Vocabulary> vocabulary() {
  static const auto shared = std::make_shared<const grammar::Vocabulary>(token_bytes(), std::vector<int32_t>{1});
  return shared;
}

// The person schema; with a suffix, its keys renamed (name7, age7, ...): a new schema whose
// strings, integers and enums are those of every other.
std::string person_schema(const std::string& suffix) {
  return R"({"type": "object", "properties": {"name)" + suffix + R"(": {"type": "string"}, "age)" + suffix +
         R"(": {"type": "integer"}, "tags)" + suffix +
         R"(": {"type": "array", "items": {"enum": ["a", "b", "c"]}}, "active)" + suffix +
         R"(": {"type": "boolean"}}, "required": ["name)" + suffix + R"(", "age)" + suffix + R"(", "tags)" + suffix +
         R"(", "active)" + suffix + R"("]})";
}

std::shared_ptr<grammar::Grammar> person_grammar(const std::string& suffix) {
  return std::make_shared<grammar::Grammar>(
      grammar::json_schema_grammar(nlohmann::ordered_json::parse(person_schema(suffix))));
}

std::shared_ptr<const grammar::Grammar> person_grammar() {
  static const std::shared_ptr<const grammar::Grammar> grammar = person_grammar("");
  return grammar;
}

// The states: before the document, inside a string (nearly every token allowed: the walk's worst
// case), before a number, inside an array of enum values.
std::string person_prefix(int state, const std::string& suffix) {
  const std::string name = "{\"name" + suffix + "\": \"Ann";
  const std::string age = name + "\", \"age" + suffix + "\": ";
  const std::string prefixes[] = {"", name + " Lee, from ", age, age + "31, \"tags" + suffix + "\": [\"a\", "};
  return prefixes[state];
}

std::shared_ptr<grammar::Grammar> uncached(const grammar::Grammar& grammar) {
  auto fresh = std::make_shared<grammar::Grammar>(grammar);
  fresh->masks = std::make_shared<grammar::MaskCache>();
  return fresh;
}

// Fresh grammars for each iteration: in a process that has seen no grammar (new_process: a new
// vocabulary, every stack top a trie walk), or of a new schema in a process that has decoded
// others (the long-lived vocabulary knows the tops of JSON strings, integers and enums; the new
// keys' tops are walks, and only the uncertain tokens are tried against the state).
struct Fresh {
  std::shared_ptr<grammar::Grammar> grammar;
  std::shared_ptr<const grammar::Vocabulary> words;
  std::string suffix;
};
Fresh fresh(bool new_process) {
  static int schemas = 0;
  Fresh out;
  out.suffix = new_process ? "" : std::to_string(schemas++);
  out.grammar = person_grammar(out.suffix);
  out.words =
      new_process ? std::make_shared<const grammar::Vocabulary>(token_bytes(), std::vector<int32_t>{1}) : vocabulary();
  if (!new_process && schemas == 1) {  // the first one teaches the vocabulary the shared tops
    for (int state = 1; state < 4; ++state) {
      grammar::Matcher at(person_grammar("x"), out.words);
      at.accept_bytes(person_prefix(state, "x"));
      at.allowed_tokens();
    }
  }
  return out;
}

// A state's first mask (arg 1 = 0: in a new process, 1: of a new schema).
void BM_FirstMask(benchmark::State& state) {
  int64_t allowed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const Fresh f = fresh(state.range(1) == 0);
    grammar::Matcher matcher(f.grammar, f.words);
    matcher.accept_bytes(person_prefix(int(state.range(0)), f.suffix));
    state.ResumeTiming();
    const grammar::TokenBitmask& mask = matcher.allowed_tokens();
    allowed = 0;
    for (uint64_t word : mask) allowed += __builtin_popcountll(word);
  }
  state.counters["allowed_tokens"] = double(allowed);
}
BENCHMARK(BM_FirstMask)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->Iterations(20)->Unit(benchmark::kMillisecond);

// Inside a string of at most 64 characters, 10 written: each length is a stack top of its own
// (the rules left to write differ), in a new process (arg 0) or once seen (1).
void BM_BoundedStringMask(benchmark::State& state) {
  const auto bounded =
      std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(nlohmann::ordered_json::parse(
          R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 64}}})")));
  for (auto _ : state) {
    state.PauseTiming();
    grammar::Matcher matcher(uncached(*bounded), state.range(0) == 1 ? vocabulary() : fresh(true).words);
    matcher.accept_bytes("{\"name\": \"Ada Lovel");
    state.ResumeTiming();
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());
  }
}
BENCHMARK(BM_BoundedStringMask)->Arg(0)->Arg(1)->Iterations(20)->Unit(benchmark::kMillisecond);

void BM_CachedMask(benchmark::State& state) {
  grammar::Matcher matcher(person_grammar(), vocabulary());
  matcher.accept_bytes(person_prefix(1, ""));
  matcher.allowed_tokens();
  for (auto _ : state) {
    matcher.accept_bytes("x");  // the same state again: a string goes on
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());
  }
}
BENCHMARK(BM_CachedMask)->Unit(benchmark::kMicrosecond);

// A whole answer, token by token as the tokenizer splits it: the mask and the accept for each
// token, as a request pays them: the first request in a new process (arg 0), the first with a
// new schema (1), the same schema again (2: every state's mask cached).
void BM_Document(benchmark::State& state) {
  const auto answer = [](const std::string& suffix) {
    return tokenizer().encode(R"({"name)" + suffix + R"(": "Ada Lovelace, analyst of the Analytical Engine", "age)" +
                              suffix + R"(": 36, "tags)" + suffix + R"(": ["a", "c", "b"], "active)" + suffix +
                              R"(": true})");
  };
  const auto again = uncached(*person_grammar());
  size_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Fresh f = state.range(0) == 2 ? Fresh{again, vocabulary(), ""} : fresh(state.range(0) == 0);
    grammar::Matcher matcher(f.grammar, f.words);
    const std::vector<int32_t> ids = answer(f.suffix);
    tokens = ids.size() + 1;
    state.ResumeTiming();
    for (int32_t token : ids) {
      const grammar::TokenBitmask& mask = matcher.allowed_tokens();
      if (!((mask[size_t(token) / 64] >> (token % 64)) & 1) || !matcher.accept_token(token)) {
        state.SkipWithError("the answer's token is not allowed");
        break;
      }
    }
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());  // the end of sequence
  }
  state.counters["tokens"] = double(tokens);
}
BENCHMARK(BM_Document)->Arg(0)->Arg(1)->Iterations(20)->Unit(benchmark::kMillisecond);  // a new vocabulary or schema
                                                                                        // each
BENCHMARK(BM_Document)->Arg(2)->Unit(benchmark::kMillisecond);

// Applying a mask to the logits: a string's (nearly every token allowed) and a number's (11).
void BM_ApplyMask(benchmark::State& state) {
  grammar::Matcher matcher(person_grammar(), vocabulary());
  matcher.accept_bytes(person_prefix(int(state.range(0)), ""));
  const grammar::TokenBitmask mask = matcher.allowed_tokens();
  std::vector<float> logits(size_t(vocabulary()->size()), 1.0f);
  for (auto _ : state) {
    grammar::apply_token_mask(mask, logits.data(), vocabulary()->size());
    benchmark::DoNotOptimize(logits.data());
  }
}
BENCHMARK(BM_ApplyMask)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond);

void BM_BuildVocabulary(benchmark::State& state) {
  const std::vector<std::string> bytes = token_bytes();
  for (auto _ : state) benchmark::DoNotOptimize(grammar::Vocabulary(bytes, {1}).size());
  state.counters["tokens"] = double(bytes.size());
}
BENCHMARK(BM_BuildVocabulary)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mlaserve

BENCHMARK_MAIN();
