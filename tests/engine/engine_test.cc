// Greedy output of a request is the same alone and in a batch of 16 (with chunked prefill,
// prefix sharing and preemption in play). An executor's cache pool is resident from the start.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "engine/executor.h"
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

TEST(Engine, BatchedGreedyEqualsAlone) {
  testing::TempDir dir;
  testing::write_model(dir.path(), testing::micro_config(), StorageDType::BF16, 3);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  EngineConfig config;
  config.block_size = 4;
  config.kv_cache_tokens = 4 * 40;  // small: forces preemption with 16 requests
  config.scheduler.chunked_prefill_size = 32;
  std::vector<std::vector<int32_t>> alone;
  {
    Engine engine(*model, *tokenizer, config);
    for (int i = 0; i < 16; ++i) alone.push_back(run_to_end(engine.submit(greedy(i))));
  }
  Engine engine(*model, *tokenizer, config);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 16; ++i) handles.push_back(engine.submit(greedy(i)));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(run_to_end(handles[i]), alone[i]) << "request " << i;
  EXPECT_GT(engine.metrics().preemptions.load(), 0);
  EXPECT_GT(engine.metrics().prefix_hit_tokens.load(), 0);
  // Gauges are updated at the end of the engine's step, after the last event was sent.
  for (int wait = 0; wait < 100 && engine.metrics().kv_blocks_used.load() != 0; ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine.metrics().kv_blocks_used.load(), 0);
}

// Kimi Linear: each running sequence holds a KDA state slot; a preempted sequence is
// recomputed from its first token into a zeroed state, or from a cached prefix whose state
// snapshot was kept, so batching, preemption and prefix reuse do not change its tokens.
TEST(Engine, KimiLinearBatchedGreedyEqualsAlone) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("kimi-linear-tiny"), StorageDType::BF16, 5);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  EngineConfig config;
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
  for (int i = 0; i < 12; ++i) EXPECT_EQ(run_to_end(handles[i]), alone[i]) << "request " << i;
  EXPECT_GT(engine.metrics().preemptions.load(), 0);
  EXPECT_GT(engine.metrics().prefix_hit_tokens.load(), 0);
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

}  // namespace
}  // namespace mlaserve
