// Microbenchmark of the absorbed MLA decode kernels at DeepSeek-V3 / Kimi K3 latent sizes
// (kv_lora_rank 512 + rope 64, bf16 cache), one query: 12 heads (Kimi K3 per rank at TP 8)
// padded to 16 or generic, 16 heads native (DeepSeek-V3 at TP 8), 128 (DeepSeek-V3 on one
// rank: eight 16-head blocks); and 16 heads at the `mini` preset's sizes (256 + 32). Arguments: heads, positions,
// kv_lora_rank (rope = rank / 8), and for BM_Queries queries (a chunk of new tokens after the cache, as a prefill chunk
// run absorbed: query i sees positions - queries + i + 1), for BM_FromMemory the layers called in turn (their caches
// beyond L3, as in a decode step). BM_ThenProjection: each layer's attention followed by the
// o_proj product it feeds, with and without the attention's read_next prefetches.
// BM_AfterStream: each call after the threads read other data, as a decode step reads the
// weights between two layers' attention (a Zen 2 VM: 32 MB made a call 1.5-1.8x
// slower, as slow as inside the model). Items/s = heads x positions x queries per second.
//   build/bench/mla_decode_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <chrono>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/mla_decode.h"
#include "random_weight.h"

namespace mlaserve {
namespace {

constexpr int64_t kBlock = 16;

// One decode call's inputs: `queries` queries of `heads` heads over `layers` layers of cache
// of `context` positions each (rank + rank / 8 bf16 values a row), laid out as the engine's
// pool (a block holds every layer's 16 rows).
struct DecodeInputs {
  std::vector<float> q_latent, q_pe, out;
  std::vector<uint16_t> pool;
  std::vector<int32_t> table;
  MlaAbsorbedParams params;

  DecodeInputs(int64_t heads, int64_t context, int64_t rank, int64_t queries, int64_t layers) {
    const int64_t rope = rank / 8, blocks = context / kBlock;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    q_latent.resize(size_t(queries * heads * rank));
    q_pe.resize(size_t(queries * heads * rope));
    out.resize(q_latent.size());
    for (auto& v : q_latent) v = normal(rng);
    for (auto& v : q_pe) v = normal(rng);
    pool.resize(size_t(layers * blocks * kBlock * (rank + rope)));
    for (auto& v : pool) v = f32_to_bf16(normal(rng));
    table.resize(size_t(blocks));
    std::iota(table.begin(), table.end(), 0);
    params.q_latent = q_latent.data();
    params.q_pe = q_pe.data();
    params.out_latent = out.data();
    params.cache = {pool.data(), CacheDType::BF16, table.data(), blocks, kBlock, layers, rank + rope};
    params.n_queries = queries;
    params.first_position = context - queries;
    params.n_heads = heads;
    params.kv_lora_rank = rank;
    params.qk_rope_head_dim = rope;
    params.softmax_scale = 0.07f;
  }
};

// The layers called a layer at a time in turn: with more than the last-level cache holds, each
// call reads its rows from memory, as a model's decode step does.
void run(benchmark::State& state, MlaDecodeKernel kernel, int64_t queries = 1, int64_t layers = 1) {
  const int64_t heads = state.range(0), context = state.range(1);
  DecodeInputs inputs(heads, context, state.range(2), queries, layers);
  KernelConfig config = kernel_config();
  config.mla_decode = kernel;
  const ScopedKernelConfig use(config);
  for (int64_t call = 0; auto _ : state) {
    inputs.params.layer = call++ % layers;
    mla_absorbed_attention(inputs.params);
    benchmark::DoNotOptimize(inputs.out.data());
  }
  state.SetItemsProcessed(state.iterations() * heads * context * queries);
  state.SetLabel(mla_decode_kernel_name(choose_mla_decode_kernel(heads, config)));
}

void BM_Padded(benchmark::State& state) { run(state, MlaDecodeKernel::Padded); }
void BM_Generic(benchmark::State& state) { run(state, MlaDecodeKernel::Generic); }
void BM_Auto(benchmark::State& state) { run(state, MlaDecodeKernel::Auto); }
void BM_Queries(benchmark::State& state) { run(state, MlaDecodeKernel::Auto, state.range(3)); }
void BM_FromMemory(benchmark::State& state) { run(state, MlaDecodeKernel::Auto, 1, state.range(3)); }

// A layer's absorbed attention (16 heads, rank 512, cache from memory as in BM_FromMemory) and
// then the product it feeds, a BF16 2048 x 2048 o_proj (small's), one token, 12 layers in turn,
// each with its own cache and weight; with read_next 1 the attention prefetches the weight
// (mla_absorbed_attention's read_next). Counters: microseconds a layer of each.
void BM_ThenProjection(benchmark::State& state) {
  const int64_t layers = 12;
  DecodeInputs inputs(16, state.range(0), 512, 1, layers);
  MlaAbsorbedParams& params = inputs.params;
  const bench::RandomWeight first(WeightFormat::Bf16Panels, 2048, 2048);
  std::vector<std::unique_ptr<bench::RandomWeight>> weights;
  for (int64_t l = 0; l < layers; ++l) weights.push_back(std::make_unique<bench::RandomWeight>(first));
  std::vector<float> x(2048, 0.1f), y(2048);
  using Clock = std::chrono::steady_clock;
  double attention_s = 0, projection_s = 0;
  for (auto _ : state) {
    for (int64_t layer = 0; layer < layers; ++layer) {
      params.layer = layer;
      const LinearWeight& weight = weights[size_t(layer)]->weight;
      const ByteRange read_next = weight.stored_codes();
      const auto start = Clock::now();
      mla_absorbed_attention(std::span(&params, 1), state.range(1) ? std::span(&read_next, 1) : std::span<ByteRange>());
      const auto attended = Clock::now();
      linear(weight, x.data(), 1, y.data());
      projection_s += std::chrono::duration<double>(Clock::now() - attended).count();
      attention_s += std::chrono::duration<double>(attended - start).count();
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["attention_us"] = 1e6 * attention_s / double(state.iterations() * layers);
  state.counters["projection_us"] = 1e6 * projection_s / double(state.iterations() * layers);
}

// 16 heads over 1024 positions, 64 layers in turn (from memory), each call after the pool's
// threads read range(0) MB of other data (a line in 16 floats), as a decode step streams the
// weights of the layer before; only the calls timed.
void BM_AfterStream(benchmark::State& state) {
  DecodeInputs inputs(16, 1024, 512, 1, 64);
  const std::vector<float> other(size_t(state.range(0)) << 18, 1.0f);
  std::vector<float> sums(size_t(thread_pool().size()));
  double attention_s = 0;
  for (int64_t call = 0; auto _ : state) {
    thread_pool().parallel_for(
        int64_t(other.size()),
        [&](int64_t begin, int64_t end, int worker) {
          float sum = 0.0f;
          for (int64_t i = begin; i < end; i += 16) sum += other[size_t(i)];
          sums[size_t(worker)] += sum;
        },
        4096);
    inputs.params.layer = call++ % 64;
    const auto start = std::chrono::steady_clock::now();
    mla_absorbed_attention(inputs.params);
    attention_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(inputs.out.data());
  }
  benchmark::DoNotOptimize(sums.data());
  state.counters["attention_us"] = 1e6 * attention_s / double(state.iterations());
}

BENCHMARK(BM_Padded)
    ->Args({12, 1024, 512})
    ->Args({12, 4096, 512})
    ->Args({16, 1024, 512})
    ->Args({16, 4096, 512})
    ->Args({16, 1024, 256})
    ->Args({16, 64, 512})
    ->Args({16, 256, 512})
    ->UseRealTime();
BENCHMARK(BM_Generic)->Args({12, 1024, 512})->Args({12, 4096, 512})->UseRealTime();
BENCHMARK(BM_Auto)
    ->Args({12, 1024, 512})
    ->Args({12, 4096, 512})
    ->Args({16, 4096, 512})
    ->Args({128, 4096, 512})
    ->UseRealTime();
// 64 layers of 1024 positions (75 MB at rank 512), 8 (9 MB, about what a Zen 2 VM's L3 kept).
BENCHMARK(BM_FromMemory)->Args({16, 1024, 512, 64})->Args({16, 1024, 512, 8})->Args({16, 4096, 512, 16})->UseRealTime();
BENCHMARK(BM_ThenProjection)->ArgsProduct({{64, 1024, 4096}, {0, 1}})->UseRealTime();
BENCHMARK(BM_AfterStream)->Arg(0)->Arg(8)->Arg(32)->Arg(128)->UseRealTime();
BENCHMARK(BM_Queries)->Args({16, 2048, 256, 1})->Args({16, 2048, 256, 16})->Args({16, 2048, 512, 16})->UseRealTime();

}  // namespace
}  // namespace mlaserve
