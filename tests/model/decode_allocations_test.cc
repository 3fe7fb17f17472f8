// After its first steps a decode step allocates nothing on the heap: the model's and kernels'
// buffers are thread-local and reused (issue #6: "no allocation on the per-token path"). The
// sequences start at position kStartPosition (the cache's rows before it are zeros) and the
// warm-up goes past 128 positions, where a lone sequence's attention starts splitting over the
// threads (64 positions a part) and the second thread first runs an item of it.
// The engine's forwards after its warm-up allocate nothing either, whatever the requests.
// Its own test binary, since it replaces the global operator new to count every allocation
// of every thread (the rank's kernel pool included).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "base/thread_pool.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "kernels/dispatch.h"
#include "kernels/mla_decode.h"
#include "model/causal_lm.h"
#include "engine/thread_ranks.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"
#include "tools/model_presets.h"

namespace {
std::atomic<int64_t> allocations{0};
std::atomic<int64_t> allocations_off_client{0};  // by every thread but those marked as clients
thread_local bool client_thread = false;

void* counted(std::size_t bytes, std::size_t alignment) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (!client_thread) allocations_off_client.fetch_add(1, std::memory_order_relaxed);
  bytes = std::max<std::size_t>(bytes, 1);
  void* p = alignment > alignof(std::max_align_t)
                ? std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment)
                : std::malloc(bytes);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t bytes) { return counted(bytes, 0); }
void* operator new[](std::size_t bytes) { return counted(bytes, 0); }
void* operator new(std::size_t bytes, std::align_val_t alignment) { return counted(bytes, std::size_t(alignment)); }
void* operator new[](std::size_t bytes, std::align_val_t alignment) { return counted(bytes, std::size_t(alignment)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace mlaserve {
namespace {

constexpr int kStartPosition = 116, kWarmUp = 24, kSteps = 60, kMaxBatch = 4;
constexpr int kBlockSize = kStartPosition + kWarmUp + kSteps;

// An fp32 latent-cache pool of kMaxBatch blocks, each long enough for a sequence's steps,
// then kMaxBatch recurrent states (Kimi Linear's KDA layers).
int64_t block_floats(const ModelConfig& config) { return kBlockSize * config.cache_layers() * config.kv_latent_dim(); }
std::vector<float> cache_pool(const ModelConfig& config) {
  return std::vector<float>(size_t(kMaxBatch * (block_floats(config) + config.recurrent_state_bytes() / 4)));
}

// Steps of `batch` sequences decoding one token each (absorbed MLA; sequence s in block s of
// one pool) through forward(sequences, logits); the allocations after the first kWarmUp.
template <class Forward>
int64_t allocations_after_warm_up(const ModelConfig& config, Forward forward, int batch) {
  const int64_t vocab = config.vocab_size;
  std::vector<float> pool = cache_pool(config);
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  std::vector<float> logits(size_t(batch) * size_t(vocab));
  std::vector<ForwardSequence> sequences;
  for (int s = 0; s < batch; ++s) {
    LatentCacheView cache;
    cache.pool = pool.data();
    cache.block_table = &blocks[size_t(s)];
    cache.n_blocks = 1;
    cache.block_size = kBlockSize;
    cache.n_layers = config.cache_layers();
    cache.latent_dim = config.kv_latent_dim();
    if (config.recurrent_state_bytes() > 0)
      cache.state_offset = (kMaxBatch * block_floats(config)) * 4 + s * config.recurrent_state_bytes();
    tokens[size_t(s)] = 7 + 1000 * s;
    sequences.push_back(
        {std::span(&tokens[size_t(s)], 1), kStartPosition, cache, MlaPath::Absorbed, ForwardSequence::Logits::Last});
  }
  int64_t before = 0;
  for (int step = 0; step < kWarmUp + kSteps; ++step) {
    if (step == kWarmUp) before = allocations.load();
    forward(sequences, logits.data());
    for (int s = 0; s < batch; ++s) {
      tokens[size_t(s)] = int32_t(std::max_element(logits.begin() + s * vocab, logits.begin() + (s + 1) * vocab) -
                                  (logits.begin() + s * vocab));
      ++sequences[size_t(s)].start_position;
    }
  }
  return allocations.load() - before;
}

// DeepSeek-V3 (MLA + MoE) and Kimi K3 (KDA + MLA, LatentMoE).
TEST(DecodeAllocations, NoneAfterTheFirstSteps) {
  for (const char* preset : {"tiny", "kimi-k3-tiny"}) {
    testing::TempDir dir;
    testing::write_model(dir.path(), model_preset(preset), StorageDType::BF16, 8);
    auto mapped = load_causal_lm(dir.path());
    ShardSpec spec;
    spec.copy_weights = true;
    auto copied = mapped->shard(spec, nullptr);
    for (const CausalLM* model : {mapped.get(), copied.get()})
      for (int batch : {1, 4}) {
        const auto forward = [&](std::span<const ForwardSequence> sequences, float* logits) {
          model->forward(sequences, logits);
        };
        EXPECT_EQ(allocations_after_warm_up(model->config(), forward, batch), 0)
            << preset << ", batch " << batch << (model == copied.get() ? ", copied weights" : ", mapped weights");
      }
  }
}

// Six heads (Kimi K3's 12 per rank, halved) run neither natively nor for free: the padded
// kernel (auto's choice) and the generic one, each forced.
TEST(DecodeAllocations, NoneWithPaddedOrGenericHeads) {
  testing::TempDir dir;
  nlohmann::json config = model_preset("tiny");
  config["num_attention_heads"] = config["num_key_value_heads"] = 6;
  testing::write_model(dir.path(), config, StorageDType::BF16, 8);
  auto model = load_causal_lm(dir.path());
  for (MlaDecodeKernel kernel : {MlaDecodeKernel::Padded, MlaDecodeKernel::Generic}) {
    KernelConfig kernels = kernel_config();
    kernels.mla_decode = kernel;
    const ScopedKernelConfig use(kernels);
    ASSERT_EQ(choose_mla_decode_kernel(6, kernels), kernel);
    const auto forward = [&](std::span<const ForwardSequence> sequences, float* logits) {
      model->forward(sequences, logits);
    };
    for (int batch : {1, 3})
      EXPECT_EQ(allocations_after_warm_up(model->config(), forward, batch), 0)
          << mla_decode_kernel_name(kernel) << ", batch " << batch;
  }
}

// One rank, counting the allocations of every thread but the client's while a forward runs,
// once `counting` (after the engine's warm-up).
class CountingExecutor : public ModelExecutor {
 public:
  explicit CountingExecutor(const CausalLM& model) : rank_(model) {}
  const ModelConfig& config() const override { return rank_.config(); }
  std::string describe() const override { return rank_.describe(); }
  void* allocate_cache(size_t bytes) override { return rank_.allocate_cache(bytes); }
  void forward(std::span<const ForwardSequence> batch, float* logits, const HiddenStates* hidden) override {
    const int64_t before = allocations_off_client.load();
    rank_.forward(batch, logits, hidden);
    if (counting) {
      allocations_serving += allocations_off_client.load() - before;
      ++forwards;
    }
  }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override { rank_.copy_in_cache(from, to, bytes); }
  RankWeightBytes weight_bytes() const override { return rank_.weight_bytes(); }
  std::atomic<bool> counting{false};
  int64_t forwards = 0, allocations_serving = 0;

 private:
  SingleRankExecutor rank_;
};

// The engine's warm-up runs the largest step the scheduler can form, so requests up to the
// longest context, prefill chunks beside decoding sequences, and with a drafter every sequence
// verifying its longest draft, allocate nothing in a forward.
TEST(EngineAllocations, NoneInAForwardAfterTheWarmUp) {
  client_thread = true;  // this thread submits and reads while the engine's thread runs forwards
  set_num_threads(1);    // with more, which thread runs which share of a step varies
  for (const auto& [preset, speculative] :
       std::vector<std::pair<const char*, bool>>{{"tiny", false}, {"kimi-k3-tiny", false}, {"tiny", true}}) {
    const std::string name = std::string(preset) + (speculative ? ", ngram drafts" : "");
    testing::TempDir dir;
    testing::write_model(dir.path(), model_preset(preset), StorageDType::BF16, 8);
    auto model = load_causal_lm(dir.path());
    auto tokenizer = Tokenizer::load(dir.path());
    CountingExecutor executor(*model);
    EngineConfig config;
    config.max_model_len = 256;
    config.kv_cache_tokens = 4 * 256;
    config.scheduler.max_num_seqs = 4;
    config.scheduler.chunked_prefill_size = 64;
    if (speculative) {  // prompts that repeat a 5-token cycle, so that prompt lookup drafts
      config.drafter = make_drafter("ngram");
      config.num_draft_tokens = 4;
      config.draft_policy = DraftPolicyKind::Fixed;
    }
    int64_t drafted = 0;
    {
      Engine engine(executor, *tokenizer, config);
      executor.counting = true;
      for (const auto& lengths : std::vector<std::vector<int>>{{9, 40}, {120, 200, 31, 64}, {230, 17, 150}}) {
        std::vector<std::shared_ptr<RequestHandle>> handles;
        for (size_t i = 0; i < lengths.size(); ++i) {
          EngineRequest request;
          for (int t = 0; t < lengths[i]; ++t)
            request.prompt.push_back(int32_t(speculative ? t % 5 + 5 * int(i) : (t * 37 + 101 * i) % 500));
          request.max_tokens = 256 - lengths[i];
          request.ignore_eos = true;
          handles.push_back(engine.submit(std::move(request)));
        }
        for (const auto& handle : handles)
          for (bool finished = false; !finished;)
            for (const StreamEvent& event : handle->wait(std::chrono::milliseconds(100))) finished |= event.finished;
      }
      drafted = engine.metrics().spec_draft_tokens;
    }
    EXPECT_GT(executor.forwards, speculative ? 20 : 100) << name;
    if (speculative) {
      EXPECT_GT(drafted, 10) << name;
    }
    EXPECT_EQ(executor.allocations_serving, 0) << name;
  }
  set_num_threads(0);
  client_thread = false;
}

// A prompt longer than one expanded key range (kMlaExpandedKeyTile) allocates nothing after a
// warm-up whose prefill chunk ends just past one range: the expanded form's scratch is sized
// by the range, not the context (each form forced, and the cost model's choice).
TEST(EngineAllocations, NoneForAPromptOfSeveralKeyRangesAfterTheWarmUp) {
  client_thread = true;
  set_num_threads(1);
  testing::TempDir dir;
  nlohmann::json preset = model_preset("tiny");
  preset["max_position_embeddings"] = 16384;
  testing::write_model(dir.path(), preset, StorageDType::BF16, 8);
  auto model = load_causal_lm(dir.path());
  auto tokenizer = Tokenizer::load(dir.path());
  for (const MlaPath path : {MlaPath::Expanded, MlaPath::Absorbed, MlaPath::Auto}) {
    CountingExecutor executor(*model);
    EngineConfig config;
    config.max_model_len = 7000;
    config.kv_cache_tokens = 2 * 7000;
    config.scheduler.max_num_seqs = 2;
    config.scheduler.chunked_prefill_size = 1024;
    config.prefill_path = path;
    {
      Engine engine(executor, *tokenizer, config);
      executor.counting = true;
      std::vector<std::shared_ptr<RequestHandle>> handles;
      for (const int length : {6500, 4500}) {
        EngineRequest request;
        for (int t = 0; t < length; ++t) request.prompt.push_back(int32_t((t * 37 + length) % 500));
        request.max_tokens = 4;
        request.ignore_eos = true;
        handles.push_back(engine.submit(std::move(request)));
      }
      for (const auto& handle : handles)
        for (bool finished = false; !finished;)
          for (const StreamEvent& event : handle->wait(std::chrono::milliseconds(100))) finished |= event.finished;
    }
    EXPECT_GT(executor.forwards, 4) << mla_path_name(path);
    EXPECT_EQ(executor.allocations_serving, 0) << mla_path_name(path);
  }
  set_num_threads(0);
  client_thread = false;
}

// The same through two thread ranks, each with its own caches (the engine's pools).
TEST(DecodeAllocations, NoneAfterTheFirstStepsOnThreadRanks) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::BF16, 8);
  auto model = load_causal_lm(dir.path());
  ExecutorOptions options;
  options.ranks = 2;
  options.threads = 2;
  options.copy_weights = true;
  ThreadParallelModel ranks(*model, options);
  std::vector<float> second_rank_pool = cache_pool(model->config());  // rank 1's copy of the pool
  for (int batch : {1, 3}) {
    const auto forward = [&](std::span<const ForwardSequence> sequences, float* logits) {
      void* const pools[2] = {sequences[0].cache.pool, second_rank_pool.data()};
      ranks.forward(sequences, logits, pools);
    };
    EXPECT_EQ(allocations_after_warm_up(model->config(), forward, batch), 0) << "batch " << batch;
  }
}

}  // namespace
}  // namespace mlaserve
