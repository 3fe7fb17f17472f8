// Constrained decoding's cost per token at a Kimi-sized vocabulary: the token mask of a JSON
// schema's grammar at the states a document passes through, computed afresh (a state not seen
// before in the request) and from the request's cache, and over whole documents of random
// allowed tokens (what a request pays per token on average); building the vocabulary's trie.
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

std::shared_ptr<const grammar::Grammar> person_grammar() {
  static const auto grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(nlohmann::ordered_json::parse(R"({
      "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}}, "active": {"type": "boolean"}},
      "required": ["name", "age", "tags", "active"]})")));
  return grammar;
}

// The states: before the document, inside a string (nearly every token allowed: the walk's worst
// case), before a number, inside an array of enum values.
const std::vector<std::string> kPrefixes = {"", "{\"name\": \"Ann Lee, from ", "{\"name\": \"Ann\", \"age\": ",
                                            "{\"name\": \"Ann\", \"age\": 31, \"tags\": [\"a\", "};

void BM_FirstMask(benchmark::State& state) {
  const std::string& prefix = kPrefixes[size_t(state.range(0))];
  int64_t allowed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto fresh = std::make_shared<grammar::Grammar>(*person_grammar());
    fresh->masks = std::make_shared<grammar::MaskCache>();  // nothing cached
    grammar::Matcher matcher(fresh, vocabulary());
    matcher.accept_bytes(prefix);
    state.ResumeTiming();
    const grammar::TokenBitmask& mask = matcher.allowed_tokens();
    allowed = 0;
    for (uint64_t word : mask) allowed += __builtin_popcountll(word);
  }
  state.counters["allowed_tokens"] = double(allowed);
}
BENCHMARK(BM_FirstMask)->DenseRange(0, 3)->Unit(benchmark::kMillisecond);

// Inside a string of at most 64 characters, 10 written: each length is a state of its own, so
// the walk cannot take the shortcut of an unbounded string's loop.
void BM_BoundedStringMask(benchmark::State& state) {
  const auto bounded = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(
      nlohmann::ordered_json::parse(R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 64}}})")));
  for (auto _ : state) {
    state.PauseTiming();
    auto fresh = std::make_shared<grammar::Grammar>(*bounded);
    fresh->masks = std::make_shared<grammar::MaskCache>();
    grammar::Matcher matcher(fresh, vocabulary());
    matcher.accept_bytes("{\"name\": \"Ada Lovel");
    state.ResumeTiming();
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());
  }
}
BENCHMARK(BM_BoundedStringMask)->Unit(benchmark::kMillisecond);

void BM_CachedMask(benchmark::State& state) {
  grammar::Matcher matcher(person_grammar(), vocabulary());
  matcher.accept_bytes(kPrefixes[1]);
  matcher.allowed_tokens();
  for (auto _ : state) {
    matcher.accept_bytes("x");  // the same state again: a string goes on
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());
  }
}
BENCHMARK(BM_CachedMask)->Unit(benchmark::kMicrosecond);

// A whole answer, token by token as the tokenizer splits it: the mask and the accept for each
// token, as a request pays them; the first request with the schema (nothing cached: arg 0) and
// a later one (arg 1).
void BM_Document(benchmark::State& state) {
  const std::vector<int32_t> answer = tokenizer().encode(
      R"({"name": "Ada Lovelace, analyst of the Analytical Engine", "age": 36, "tags": ["a", "c", "b"], "active": true})");
  auto warm = std::make_shared<grammar::Grammar>(*person_grammar());
  warm->masks = std::make_shared<grammar::MaskCache>();
  for (auto _ : state) {
    state.PauseTiming();
    auto grammar = warm;
    if (state.range(0) == 0) {
      grammar = std::make_shared<grammar::Grammar>(*person_grammar());
      grammar->masks = std::make_shared<grammar::MaskCache>();
    }
    grammar::Matcher matcher(grammar, vocabulary());
    state.ResumeTiming();
    for (int32_t token : answer) {
      const grammar::TokenBitmask& mask = matcher.allowed_tokens();
      if (!((mask[size_t(token) / 64] >> (token % 64)) & 1) || !matcher.accept_token(token)) {
        state.SkipWithError("the answer's token is not allowed");
        break;
      }
    }
    benchmark::DoNotOptimize(matcher.allowed_tokens().data());  // the end of sequence
  }
  state.counters["tokens"] = double(answer.size() + 1);
}
BENCHMARK(BM_Document)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Applying a mask to the logits: a string's (nearly every token allowed) and a number's (11).
void BM_ApplyMask(benchmark::State& state) {
  grammar::Matcher matcher(person_grammar(), vocabulary());
  matcher.accept_bytes(kPrefixes[size_t(state.range(0))]);
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
