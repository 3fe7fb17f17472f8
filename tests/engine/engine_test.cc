// Greedy output of a request is the same alone and in a batch of 16 (with chunked prefill,
// prefix sharing and preemption in play), and with speculative decoding; sampled, speculative
// decoding keeps the target's distribution. An executor's cache pool is resident from the start.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>

#include "base/error.h"
#include "engine/executor.h"
#include "engine/model_drafter.h"
#include "grammar/json_schema.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace mlaserve {
namespace {

std::vector<int32_t> run_to_end(const std::shared_ptr<RequestHandle>& handle) {
  std::vector<int32_t> tokens;
  for (;;)
    for (const StreamEvent& event : handle->wait(std::chrono::milliseconds(100))) {
      tokens.insert(tokens.end(), event.token_ids.begin(), event.token_ids.end());
      if (event.finished) return tokens;
    }
}

EngineRequest greedy(int i) {
  EngineRequest request;
  for (int t = 0; t < 5 + 7 * i; ++t) request.prompt.push_back(int32_t(i < 8 ? t * 31 % 500 : (t * 17 + i) % 500));
  request.max_tokens = 24 + i % 5;  // long enough that running sequences outgrow the full pool
  request.ignore_eos = true;
  return request;
}

// The micro model, and an engine configuration with a pool of `blocks` blocks of 4 tokens.
class MicroEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::write_model(dir_.path(), testing::micro_config(), StorageDType::BF16, 3);
    model_ = load_causal_lm(dir_.path());
    tokenizer_ = Tokenizer::load(dir_.path());
  }
  static EngineConfig small_pool(int64_t blocks) {
    EngineConfig config;
    config.block_size = 4;
    config.kv_cache_tokens = 4 * blocks;
    config.scheduler.chunked_prefill_size = 32;
    return config;
  }
  testing::TempDir dir_;
  std::unique_ptr<CausalLM> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// In each cache dtype (an fp8 cache's blocks shared by prefixes and rebuilt after preemption
// like a bf16 one's).
TEST_F(MicroEngine, BatchedGreedyEqualsAlone) {
  for (const CacheDType dtype : {CacheDType::BF16, CacheDType::FP8}) {
    EngineConfig config = small_pool(40);  // small: forces preemption with 16 requests
    config.cache_dtype = dtype;
    auto& model = model_;
    auto& tokenizer = tokenizer_;
    std::vector<std::vector<int32_t>> alone;
    {
      Engine engine(*model, *tokenizer, config);
      for (int i = 0; i < 16; ++i) alone.push_back(run_to_end(engine.submit(greedy(i))));
    }
    Engine engine(*model, *tokenizer, config);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 16; ++i) handles.push_back(engine.submit(greedy(i)));
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(run_to_end(handles[i]), alone[i]) << "request " << i << ", " << cache_dtype_name(dtype);
    EXPECT_GT(engine.metrics().preemptions.load(), 0);
    EXPECT_GT(engine.metrics().prefix_hit_tokens.load(), 0);
    // Gauges are updated at the end of the engine's step, after the last event was sent.
    for (int wait = 0; wait < 100 && engine.metrics().kv_blocks_used.load() != 0; ++wait)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(engine.metrics().kv_blocks_used.load(), 0);
  }
}

// Kimi Linear: each running sequence holds a KDA state slot; a preempted sequence is
// recomputed from its first token into a zeroed state, or from a cached prefix whose state
// snapshot was kept, so batching, preemption and prefix reuse do not change its tokens.
TEST(Engine, KimiLinearBatchedGreedyEqualsAlone) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("kimi-linear-tiny"), StorageDType::BF16, 5);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  for (const CacheDType dtype : {CacheDType::BF16, CacheDType::FP8}) {
    EngineConfig config;
    config.cache_dtype = dtype;
    config.block_size = 4;
    config.kv_cache_tokens = 4 * 40;
    config.scheduler.chunked_prefill_size = 32;
    config.scheduler.max_num_seqs = 6;
    std::vector<std::vector<int32_t>> alone;
    {
      Engine engine(*model, *tokenizer, config);
      for (int i = 0; i < 12; ++i) alone.push_back(run_to_end(engine.submit(greedy(i))));
    }
    Engine engine(*model, *tokenizer, config);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 12; ++i) handles.push_back(engine.submit(greedy(i)));
    for (int i = 0; i < 12; ++i)
      EXPECT_EQ(run_to_end(handles[i]), alone[i]) << "request " << i << ", " << cache_dtype_name(dtype);
    EXPECT_GT(engine.metrics().preemptions.load(), 0);
    EXPECT_GT(engine.metrics().prefix_hit_tokens.load(), 0);
  }
}

TEST(Engine, RejectsWhatCanNeverRun) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 3);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  EngineConfig config;
  config.kv_cache_tokens = 64;
  config.max_model_len = 100;
  Engine engine(*model, *tokenizer, config);
  EngineRequest request;
  request.prompt = {1, 2, 3};
  request.max_tokens = 98;
  EXPECT_THROW(engine.submit(request), EngineRejection);  // beyond the KV cache
  request.max_tokens = 0;
  EXPECT_THROW(engine.submit(request), EngineRejection);
  request.prompt = {1, 99999};
  request.max_tokens = 2;
  EXPECT_THROW(engine.submit(request), EngineRejection);
}

// One rank whose forwards fail: the warm-up's failure is the engine constructor's error.
class FailingExecutor : public SingleRankExecutor {
 public:
  using SingleRankExecutor::SingleRankExecutor;
  void forward(std::span<const ForwardSequence>, float*, const HiddenStates*) override {
    throw Error("the rank is out of memory");
  }
};

TEST(Engine, AFailedWarmUpIsTheConstructorsError) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 3);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  FailingExecutor executor(*model);
  EngineConfig config;
  config.kv_cache_tokens = 64;
  try {
    Engine engine(executor, *tokenizer, config);
    FAIL() << "the engine started";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the rank is out of memory");
  }
}

// The pool is committed when allocated (place_cache_pool faults its pages in), so no decode
// step page-faults on a new position: 48 MiB, above glibc's largest mmap threshold, comes
// from fresh pages that would otherwise not be resident.
TEST(Engine, CachePoolIsResidentWhenAllocated) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 3);
  auto model = load_causal_lm(dir.path());
  SingleRankExecutor executor(*model);
  const size_t bytes = size_t(48) << 20, page = size_t(sysconf(_SC_PAGESIZE));
  const auto begin = (uintptr_t(executor.allocate_cache(bytes)) + page - 1) / page * page;
  std::vector<unsigned char> resident((bytes - page) / page);
  ASSERT_EQ(mincore(reinterpret_cast<void*>(begin), resident.size() * page, resident.data()), 0);
  EXPECT_EQ(size_t(std::count_if(resident.begin(), resident.end(), [](unsigned char flag) { return flag & 1; })),
            resident.size());
}

// Prompts that repeat themselves, so that prompt lookup finds continuations.
EngineRequest repetitive(int i, int64_t max_tokens) {
  EngineRequest request;
  for (int t = 0; t < 6 + 5 * i; ++t) request.prompt.push_back(int32_t((t % (3 + i % 4)) * 37 + i) % 500);
  request.max_tokens = max_tokens + i % 5;
  request.ignore_eos = true;
  return request;
}

// Speculative decoding is lossless: greedy output with a drafter is token for token the
// output without it, for a request alone and inside a batch of 16 (with preemption in play),
// and the drafts are really accepted. Returns the batch's share of drafted tokens accepted.
double expect_speculative_greedy_equals_plain(const CausalLM& model, const Tokenizer& tokenizer, EngineConfig plain,
                                              const std::function<std::shared_ptr<Drafter>()>& make) {
  EngineConfig speculative = plain;
  speculative.num_draft_tokens = 4;
  speculative.draft_policy = DraftPolicyKind::Fixed;  // every step drafts, so every path is taken
  std::vector<std::vector<int32_t>> want;
  {
    Engine engine(model, tokenizer, plain);
    for (int i = 0; i < 16; ++i) want.push_back(run_to_end(engine.submit(repetitive(i, i == 0 ? 256 : 24))));
  }
  speculative.drafter = make();
  Engine alone(model, tokenizer, speculative);
  EXPECT_EQ(run_to_end(alone.submit(repetitive(0, 256))), want[0]);
  EXPECT_GT(alone.metrics().spec_accepted_tokens.load(), 0);
  speculative.drafter = make();
  Engine batched(model, tokenizer, speculative);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 16; ++i) handles.push_back(batched.submit(repetitive(i, i == 0 ? 256 : 24)));
  for (int i = 0; i < 16; ++i) {
    const auto got = run_to_end(handles[i]);
    size_t first = 0;
    while (first < got.size() && first < want[i].size() && got[first] == want[i][first]) ++first;
    EXPECT_EQ(got, want[i]) << "request " << i << " differs from token " << first;
  }
  const EngineMetrics& metrics = batched.metrics();
  EXPECT_GT(metrics.spec_accepted_tokens.load(), 0);
  EXPECT_GT(metrics.preemptions.load(), 0);
  int64_t accepted_at_positions = 0, drafted_at_positions = 0;  // per-position counters add up
  for (int i = 0; i < EngineMetrics::kMaxDraftTokens; ++i) {
    EXPECT_LE(metrics.spec_accepted_at[size_t(i)].load(), metrics.spec_drafted_at[size_t(i)].load());
    accepted_at_positions += metrics.spec_accepted_at[size_t(i)];
    drafted_at_positions += metrics.spec_drafted_at[size_t(i)];
  }
  EXPECT_EQ(accepted_at_positions, metrics.spec_accepted_tokens.load());
  EXPECT_EQ(drafted_at_positions, metrics.spec_draft_tokens.load());
  return double(metrics.spec_accepted_tokens) / double(std::max<int64_t>(1, metrics.spec_draft_tokens));
}

TEST_F(MicroEngine, NgramSpeculativeGreedyEqualsPlainAloneAndInABatch) {
  // A pool small enough that 16 requests preempt; verification over an fp8 cache too.
  for (const CacheDType dtype : {CacheDType::BF16, CacheDType::FP8}) {
    EngineConfig config = small_pool(120);
    config.cache_dtype = dtype;
    expect_speculative_greedy_equals_plain(*model_, *tokenizer_, config, [] { return make_drafter("ngram"); });
  }
}

// The target itself as its draft model: lossless, and nearly every draft is accepted (the
// draft's forward batches positions differently, so a near tie may go the other way).
TEST_F(MicroEngine, DraftModelSpeculativeGreedyEqualsPlainAloneAndInABatch) {
  const double accepted = expect_speculative_greedy_equals_plain(*model_, *tokenizer_, small_pool(100), [&] {
    return std::make_shared<DraftModelDrafter>(load_causal_lm(dir_.path()), dir_.path());
  });
  EXPECT_GT(accepted, 0.95);
}

// Proposes the target's own greedy continuation, known from a plain run (`runs`: each request's
// prompt and output), with the token at draft position (calls mod (k + 1)) made wrong: every
// length of accepted prefix, all k included, comes up in turn.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(std::vector<std::vector<int32_t>> runs, int32_t vocab) : runs_(std::move(runs)), vocab_(vocab) {}
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override {
    proposals.assign(requests.size(), {});
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto& tokens = requests[i].tokens;
      for (const auto& run : runs_) {
        if (run.size() < tokens.size() || !std::equal(tokens.begin(), tokens.end(), run.begin())) continue;
        for (size_t j = tokens.size(); j < run.size() && int64_t(proposals[i].size()) < requests[i].max_tokens; ++j)
          proposals[i].push_back(run[j]);
        const size_t wrong = size_t(calls_++ % (requests[i].max_tokens + 1));
        if (wrong < proposals[i].size()) proposals[i][wrong] = (proposals[i][wrong] + 1) % vocab_;
        break;
      }
    }
  }
  std::string describe() const override { return "oracle"; }

 private:
  std::vector<std::vector<int32_t>> runs_;
  int32_t vocab_;
  int64_t calls_ = 0;
};

// Kimi Linear drafting: a rejected draft rolls the KDA state back to its copy from before the
// step and the accepted positions are computed again, so the output is still the model's own,
// alone and in a batch of 16 with preemption.
TEST(Engine, KimiLinearSpeculativeRollsTheStateBackAfterRejections) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("kimi-linear-tiny"), StorageDType::BF16, 5);
  const auto model = load_causal_lm(dir.path());
  const auto tokenizer = Tokenizer::load(dir.path());
  EngineConfig config;
  config.cache_dtype = CacheDType::F32;
  config.block_size = 4;
  config.kv_cache_tokens = 4 * 100;
  config.scheduler.chunked_prefill_size = 32;
  config.scheduler.max_num_seqs = 8;
  std::vector<std::vector<int32_t>> want, runs;
  {
    Engine engine(*model, *tokenizer, config);
    for (int i = 0; i < 16; ++i) {
      const EngineRequest request = repetitive(i, i == 0 ? 128 : 24);
      want.push_back(run_to_end(engine.submit(request)));
      runs.push_back(request.prompt);
      runs.back().insert(runs.back().end(), want.back().begin(), want.back().end());
    }
  }
  config.num_draft_tokens = 3;
  config.draft_policy = DraftPolicyKind::Fixed;
  for (const int n_requests : {1, 16}) {
    config.drafter = std::make_shared<OracleDrafter>(runs, int32_t(model->config().vocab_size));
    Engine engine(*model, *tokenizer, config);
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < n_requests; ++i) handles.push_back(engine.submit(repetitive(i, i == 0 ? 128 : 24)));
    for (int i = 0; i < n_requests; ++i)
      EXPECT_EQ(run_to_end(handles[i]), want[i]) << "request " << i << " of " << n_requests;
    const EngineMetrics& metrics = engine.metrics();
    EXPECT_GT(metrics.spec_accepted_at[2].load(), 0);                                  // whole drafts accepted...
    EXPECT_LT(metrics.spec_accepted_tokens.load(), metrics.spec_draft_tokens.load());  // ...and some rejected
    if (n_requests == 16) {
      EXPECT_GT(metrics.preemptions.load(), 0);
    }
  }
}

TEST_F(MicroEngine, MtpDrafterNeedsAnMtpLayer) {
  try {
    make_drafter("mtp", model_.get());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_nextn_predict_layers is 0"), std::string::npos) << e.what();
  }
}

// expect_speculative_greedy_equals_plain on the trained models/kjv with the drafter `spec`
// names (its path relative to the models directory). The cache is fp32, as generate's: in bf16
// the rounding of a latent depends on how many tokens its step computed, and this model's
// greedy text meets a near tie (logits 7.1463 and 7.1423) that a different batching tips either
// way, with speculation or without.
double expect_kjv_speculative_greedy_equals_plain(const std::string& spec) {
  const std::string models = MLASERVE_MODELS_DIR;
  const auto model = load_causal_lm(models + "/kjv");
  const auto tokenizer = Tokenizer::load(models + "/kjv");
  EngineConfig plain;
  plain.cache_dtype = CacheDType::F32;
  plain.block_size = 4;
  plain.kv_cache_tokens = 4 * 100;
  plain.scheduler.chunked_prefill_size = 32;
  const std::string resolved = spec.find(':') == std::string::npos ? spec
                                                                   : spec.substr(0, spec.find(':') + 1) + models + "/" +
                                                                         spec.substr(spec.find(':') + 1);
  return expect_speculative_greedy_equals_plain(*model, *tokenizer, plain,
                                                [&] { return make_drafter(resolved, model.get()); });
}

// The trained model's own MTP layer: lossless, and its drafts are accepted, so every sequence
// in the batch drafts from the hidden states of its own positions.
TEST(Engine, MtpSpeculativeGreedyEqualsPlainAloneAndInABatch) {
  EXPECT_GT(expect_kjv_speculative_greedy_equals_plain("mtp"), 0.3);
}

// The trained block draft (models/kjv-dflash, with its Markov head: dspark) reading models/kjv's
// layers 1, 3 and 5: lossless alone and in a batch, with drafts accepted.
TEST(Engine, BlockDraftSpeculativeGreedyEqualsPlainAloneAndInABatch) {
  EXPECT_GT(expect_kjv_speculative_greedy_equals_plain("dspark:kjv-dflash"), 0.2);
}

TEST_F(MicroEngine, BlockDraftNeedsTheTargetsVocabulary) {
  try {
    make_drafter(std::string("dflash:") + MLASERVE_MODELS_DIR + "/kjv-dflash", model_.get());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the block draft's vocabulary (4096) is not the target's"), std::string::npos)
        << e.what();
  }
}

// The first token emitted by verifying a draft, over 20,000 seeds, against the target's
// distribution at temperature 1 with top-k 6 and top-p 0.9 (chi-square over the kept tokens,
// 1% level); an engine that emitted the draft whenever the target gave it any probability
// fails the same test.
double first_token_chi_square(const std::function<int32_t(uint64_t seed)>& first_token, const std::vector<double>& p) {
  constexpr int kTrials = 20000;
  std::vector<int> counts(p.size());
  for (int trial = 0; trial < kTrials; ++trial) ++counts[size_t(first_token(uint64_t(trial)))];
  double chi_square = 0.0;
  for (size_t v = 0; v < p.size(); ++v)
    if (p[v] > 0)
      chi_square += (counts[v] - kTrials * p[v]) * (counts[v] - kTrials * p[v]) / (kTrials * p[v]);
    else if (counts[v] > 0)
      return 1e9;  // a token the filters drop
  return chi_square;
}

TEST(Engine, SpeculativeVerificationKeepsTheTargetsDistribution) {
  const std::vector<float> logits = {2.0f, 1.5f, 1.2f, 0.3f, 0.2f, 0.0f, -0.5f, -3.0f};
  SamplingOptions options;
  options.params = {1.0f, 6, 0.9f, 0.0f};
  std::vector<float> probs(logits.size());
  sampling_probs(logits.data(), int64_t(logits.size()), options.params, probs.data());
  const std::vector<double> p(probs.begin(), probs.end());
  const int kept = int(std::count_if(p.begin(), p.end(), [](double x) { return x > 0; }));
  const std::vector<int32_t> draft = {1, 0};  // a likely token, not the likeliest
  const auto verified_first = [&](uint64_t seed) {
    SamplingOptions seeded = options;
    seeded.seed = seed;
    RequestSampler sampler(seeded, {});
    std::vector<float> rows(logits);
    rows.insert(rows.end(), logits.begin(), logits.end());
    rows.insert(rows.end(), logits.begin(), logits.end());
    return sampler.verify(rows.data(), draft, int64_t(logits.size()), nullptr)[0];
  };
  const auto greedy_acceptance = [&](uint64_t seed) {  // wrong: keeps any draft the target allows
    SamplingOptions seeded = options;
    seeded.seed = seed;
    RequestSampler sampler(seeded, {});
    std::vector<float> row(logits);
    return p[size_t(draft[0])] > 0 ? draft[0] : sampler.sample(row.data(), int64_t(row.size()), nullptr);
  };
  const double critical[] = {0, 0, 9.21, 11.34, 13.28, 15.09, 16.81, 18.48};  // chi-square, p = 0.01, by dof
  EXPECT_LT(first_token_chi_square(verified_first, p), critical[kept - 1]);
  EXPECT_GT(first_token_chi_square(greedy_acceptance, p), critical[kept - 1]);
}

// Constrained decoding: sampled at temperature 1, with and without speculative decoding (whose
// n-gram drafts the grammar truncates), every output is JSON valid under the schema and ends on
// the end-of-sequence token; unconstrained, the random model writes no JSON at all.
TEST_F(MicroEngine, GrammarConstrainsEveryToken) {
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8}, "count": {"type": "integer"},
      "kind": {"enum": ["a", "b", null]}}, "required": ["name", "count", "kind"]})");
  const auto grammar = std::make_shared<const grammar::Grammar>(grammar::json_schema_grammar(schema));
  auto decode = [&](const std::vector<int32_t>& ids) { return tokenizer_->decode(ids); };
  for (const bool speculative : {false, true}) {
    EngineConfig config = small_pool(200);
    if (speculative) {
      config.drafter = make_drafter("ngram");
      config.num_draft_tokens = 3;
    }
    Engine engine(*model_, *tokenizer_, config);
    for (uint64_t seed = 0; seed < 6; ++seed) {
      EngineRequest request = greedy(int(seed));
      request.ignore_eos = false;
      request.max_tokens = 120;
      request.sampling.params.temperature = 1.0f;
      request.sampling.seed = seed;
      EngineRequest free = request;
      request.sampling.grammar = grammar;
      std::vector<int32_t> ids = run_to_end(engine.submit(request));
      ASSERT_FALSE(ids.empty());
      EXPECT_TRUE(tokenizer_->is_special(ids.back())) << "ended on its end-of-sequence token";
      const std::string text = decode(ids);
      nlohmann::json document;
      ASSERT_NO_THROW(document = nlohmann::json::parse(text)) << text;
      EXPECT_TRUE(document["name"].is_string() && document["name"].get<std::string>().size() <= 8 * 4) << text;
      EXPECT_TRUE(document["count"].is_number_integer()) << text;
      EXPECT_TRUE(document["kind"] == "a" || document["kind"] == "b" || document["kind"].is_null()) << text;
      EXPECT_FALSE(nlohmann::json::accept(decode(run_to_end(engine.submit(free))))) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace mlaserve
