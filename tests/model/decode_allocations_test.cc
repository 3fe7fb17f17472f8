// After its first steps a decode step allocates nothing on the heap: the model's and kernels'
// buffers are thread-local and reused (issue #6: "no allocation on the per-token path").
// Its own test binary, since it replaces the global operator new to count every allocation
// of every thread (the rank's kernel pool included).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>

#include "model/causal_lm.h"
#include "test_util.h"
#include "tools/model_presets.h"

namespace {
std::atomic<int64_t> allocations{0};

void* counted(std::size_t bytes, std::size_t alignment) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  bytes = std::max<std::size_t>(bytes, 1);
  void* p = alignment > alignof(std::max_align_t) ? std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment)
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

// Steps of `batch` sequences decoding one token each (absorbed MLA over their caches); the
// allocations of steps after the first `warm_up`.
int64_t allocations_after_warm_up(const CausalLM& model, int batch, int warm_up, int steps) {
  const int64_t vocab = model.config().vocab_size;
  std::vector<std::unique_ptr<SequenceCache>> caches;
  std::vector<int32_t> tokens(static_cast<size_t>(batch));
  std::vector<float> logits(size_t(batch) * size_t(vocab));
  std::vector<ForwardSequence> sequences;
  for (int s = 0; s < batch; ++s) {
    caches.push_back(std::make_unique<SequenceCache>(model.config(), warm_up + steps + 1));
    tokens[size_t(s)] = 7 + 1000 * s;
    sequences.push_back({std::span(&tokens[size_t(s)], 1), 0, caches.back()->view(), MlaPath::Absorbed,
                         ForwardSequence::Logits::Last});
  }
  int64_t before = 0;
  for (int step = 0; step < warm_up + steps; ++step) {
    if (step == warm_up) before = allocations.load();
    model.forward(sequences, logits.data());
    for (int s = 0; s < batch; ++s) {
      tokens[size_t(s)] = int32_t(std::max_element(logits.begin() + s * vocab, logits.begin() + (s + 1) * vocab) -
                                  (logits.begin() + s * vocab));
      ++sequences[size_t(s)].start_position;
    }
  }
  return allocations.load() - before;
}

TEST(DecodeAllocations, NoneAfterTheFirstSteps) {
  testing::TempDir dir;
  testing::write_model(dir.path(), model_preset("tiny"), StorageDType::BF16, 8);
  auto mapped = load_causal_lm(dir.path());
  ShardSpec spec;
  spec.copy_weights = true;
  auto copied = mapped->shard(spec, nullptr);
  for (const CausalLM* model : {mapped.get(), copied.get()})
    for (int batch : {1, 4}) {
      // Past 128 positions a lone sequence's attention splits over the threads (at 64 a part)
      // and the second thread runs it for the first time: the warm-up goes that deep.
      EXPECT_EQ(allocations_after_warm_up(*model, batch, 140, 60), 0)
          << "batch " << batch << (model == copied.get() ? ", copied weights" : ", mapped weights");
    }
}

}  // namespace
}  // namespace mlaserve
