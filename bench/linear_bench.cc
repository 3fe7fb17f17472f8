// Microbenchmark of the linear kernels per weight format against this machine's read
// bandwidth: one token (decode, memory-bound: bytes/s of weights read) and several tokens
// (batched decode and prefill, compute-bound: FLOP/s). Shapes are `small`'s dense MLP
// (2048 x 5632), one routed expert of `small` (768 x 2048 and its down-projection) and of
// `mini` (512 x 1024: gate and up).
//   build/bench/linear_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels/simd.h"
#include "random_weight.h"

namespace mlaserve {
namespace {

using bench::add_copies;
using bench::random_activations;
using bench::RandomWeight;

void run_linear(benchmark::State& state, WeightFormat format, int64_t int8_group = 0) {
  const int64_t rows = state.range(0), cols = state.range(1), tokens = state.range(2);
  // Decode-sized batches (up to 8 tokens, memory-bound): copies filling 1 GB, so the weights
  // come from memory, not from L3 (32 MB a CCD on Zen 4, but 480 MB reported by some Xeon VMs).
  std::vector<RandomWeight> weights;
  weights.emplace_back(format, rows, cols, int8_group);
  const int64_t one_copy = int64_t(weights.front().weight.bytes());
  const int copies = tokens <= 8 ? int(std::max<int64_t>(8, (int64_t(1) << 30) / one_copy)) : 1;
  add_copies(weights, copies);
  const std::vector<float> x = random_activations(tokens * cols);
  std::vector<float> y(size_t(tokens * rows));
  int next = 0;
  for (auto _ : state) {
    linear(weights[size_t(next)].weight, x.data(), tokens, y.data());
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  const double calls = double(state.iterations());
  state.counters["weight_GB/s"] =
      benchmark::Counter(calls * double(weights[0].weight.bytes()), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(calls * 2.0 * double(rows * cols * tokens) * 1e-9, benchmark::Counter::kIsRate);
}

// Read bandwidth of this machine with all the pool's threads: sum of a 512 MB array.
void BM_ReadBandwidth(benchmark::State& state) {
  std::vector<float> data(size_t(128) << 20, 1.0f);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    thread_pool().parallel_for(
        int64_t(data.size()),
        [&](int64_t begin, int64_t end, int) {
          static const std::vector<float> ones(4096, 1.0f);
          float sum = 0.0f;
          for (int64_t i = begin; i + 4096 <= end; i += 4096) sum += simd::dot_f32(data.data() + i, ones.data(), 4096);
          sink.fetch_add(int64_t(sum));
        },
        4096);
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(state.iterations()) * double(data.size() * 4), benchmark::Counter::kIsRate);
}

// The same array with each thread's share read as 4 quarters at once (4 load streams a
// thread, as the linear kernels read spread quads of rows), against BM_ReadBandwidth's one.
void BM_ReadBandwidth4Streams(benchmark::State& state) {
  constexpr int64_t kChunk = 4096;
  std::vector<float> data(size_t(128) << 20, 1.0f);
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    thread_pool().parallel_for(
        int64_t(data.size()),
        [&](int64_t begin, int64_t end, int) {
          static const std::vector<float> ones(kChunk, 1.0f);
          const float* x = ones.data();
          const int64_t chunk = int64_t(ones.size()), quarter = (end - begin) / 4 / chunk * chunk;
          float sum = 0.0f;
          for (int64_t i = 0; i < quarter; i += chunk) {
            const float* rows[4] = {&data[size_t(begin + i)], &data[size_t(begin + quarter + i)],
                                    &data[size_t(begin + 2 * quarter + i)], &data[size_t(begin + 3 * quarter + i)]};
            float out[4];
            simd::dot_4xn<1>(rows, &x, chunk, out);
            sum += out[0] + out[1] + out[2] + out[3];
          }
          sink.fetch_add(int64_t(sum));
        },
        4 * kChunk);
  }
  state.counters["GB/s"] =
      benchmark::Counter(double(state.iterations()) * double(data.size() * 4), benchmark::Counter::kIsRate);
}

void BM_BF16(benchmark::State& state) { run_linear(state, WeightFormat::BF16); }
void BM_BF16Panels(benchmark::State& state) { run_linear(state, WeightFormat::Bf16Panels); }
// BF16 panels with the activations in fewer bf16 terms (--bf16-terms; the 4th argument): on the
// AMX tiles where they run, else on vdpbf16ps where the build has it (there also 1-8 tokens at 1
// term, decode: each panel streamed; small's routed expert projections at one token;
// BM_BF16Panels has the exact kernels at those shapes).
void BM_BF16PanelsTerms(benchmark::State& state) {
  const ScopedKernelConfig use(host_kernel_config(int(state.range(3))));
  run_linear(state, WeightFormat::Bf16Panels);
}
void BM_FP8(benchmark::State& state) { run_linear(state, WeightFormat::Fp8Block); }
void BM_INT8(benchmark::State& state) { run_linear(state, WeightFormat::Int8Block); }
// INT8 with a scale per 32 columns: GGUF's Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS as mlaserve loads them.
void BM_INT8Group32(benchmark::State& state) { run_linear(state, WeightFormat::Int8Block, 32); }
void BM_INT4(benchmark::State& state) { run_linear(state, WeightFormat::Int4Group); }
void BM_MXFP4(benchmark::State& state) { run_linear(state, WeightFormat::Mxfp4); }
// INT4 and MXFP4 repacked into 16-row panels, as models load them where the panel kernels run.
void run_4bit_panels(benchmark::State& state, WeightFormat format) {
  if (!repacks_4bit_panels(kernel_config()))
    return state.SkipWithError("4-bit panels need AVX2 or AVX-512 VNNI, and no AMX");
  run_linear(state, format);
}
void BM_INT4Panels(benchmark::State& state) { run_4bit_panels(state, WeightFormat::Int4Panels); }
void BM_MXFP4Panels(benchmark::State& state) { run_4bit_panels(state, WeightFormat::Mxfp4Panels); }

// One token's dots on one core with the weight in cache (a single copy of 768 x 2048: 0.9 MB
// of 4-bit codes in L2, 3 MB of BF16 in L3): the kernel's own rate, without memory
// (BM_BF16Panels, BM_INT4 and BM_MXFP4 at 768/2048/1 run the same kernels from memory on all
// cores). Arg: 0 BF16 panels, 1 INT4 (group 32), 2 MXFP4, 3 INT4 panels, 4 MXFP4 panels.
void BM_OneCoreFromCache(benchmark::State& state) {
  constexpr WeightFormat kFormats[] = {WeightFormat::Bf16Panels, WeightFormat::Int4Group, WeightFormat::Mxfp4,
                                       WeightFormat::Int4Panels, WeightFormat::Mxfp4Panels};
  if (state.range(0) >= 3 && !repacks_4bit_panels(kernel_config()))
    return state.SkipWithError("4-bit panels need AVX2 or AVX-512 VNNI, and no AMX");
  const RandomWeight weight(kFormats[state.range(0)], 768, 2048);
  const std::vector<float> x = random_activations(2048);
  std::vector<float> y(768);
  set_num_threads(1);
  for (auto _ : state) {
    linear(weight.weight, x.data(), 1, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_num_threads(0);
  state.counters["weight_GB/s"] =
      benchmark::Counter(double(state.iterations()) * double(weight.weight.bytes()), benchmark::Counter::kIsRate);
}

// MLA decode's query absorption for one token: per head, W_UK's qk_nope_head_dim rows summed
// with the query's coefficients into a kv_lora_rank vector (linear_transposed_rows), heads
// over the pool's threads. Args: heads, qk_nope_head_dim, kv_lora_rank.
void BM_TransposedBF16(benchmark::State& state) {
  const int64_t heads = state.range(0), nope = state.range(1), rank = state.range(2);
  const int copies = int((int64_t(1) << 30) / (heads * nope * rank * 2));  // 1 GB: from memory, not from L3
  std::vector<RandomWeight> weights;
  weights.emplace_back(WeightFormat::BF16, heads * nope, rank);
  add_copies(weights, copies);
  const std::vector<float> q = random_activations(heads * nope);
  std::vector<float> y(size_t(heads * rank));
  int next = 0;
  for (auto _ : state) {
    const LinearWeight& weight = weights[size_t(next)].weight;
    std::fill(y.begin(), y.end(), 0.0f);
    thread_pool().parallel_for(heads, [&](int64_t begin, int64_t end, int) {
      for (int64_t head = begin; head < end; ++head)
        linear_transposed_rows(weight, head * nope, (head + 1) * nope, q.data() + head * nope, 0, 1,
                               y.data() + head * rank, 0);
    });
    next = (next + 1) % copies;
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(double(state.iterations()) * double(weights[0].weight.bytes()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_ReadBandwidth)->UseRealTime();
BENCHMARK(BM_OneCoreFromCache)->DenseRange(0, 4)->UseRealTime();

// A few tokens' dots on one core with a weight of `rows` x 1024 in L2 (512 rows: 256 KB of
// 4-bit codes; 256 rows: 512 KB of BF16): the kernels' own rates against the core's FMA and
// VNNI pipes. Args: rows, tokens, format (0 BF16 panels, 1 INT4, 2 MXFP4, 3 INT4 panels, 4
// MXFP4 panels).
void BM_FewTokensOneCore(benchmark::State& state) {
  constexpr WeightFormat kFormats[] = {WeightFormat::Bf16Panels, WeightFormat::Int4Group, WeightFormat::Mxfp4,
                                       WeightFormat::Int4Panels, WeightFormat::Mxfp4Panels};
  const WeightFormat format = kFormats[state.range(2)];
  if (is_4bit_panels(format) && !repacks_4bit_panels(kernel_config()))
    return state.SkipWithError("4-bit panels need AVX2 or AVX-512 VNNI, and no AMX");
  const int64_t rows = state.range(0), cols = 1024, tokens = state.range(1);
  const RandomWeight weight(format, rows, cols);
  const std::vector<float> x = random_activations(cols * tokens);
  std::vector<float> y(size_t(rows * tokens));
  set_num_threads(1);
  for (auto _ : state) {
    linear(weight.weight, x.data(), tokens, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_num_threads(0);
  state.counters["GFLOP/s"] = benchmark::Counter(double(state.iterations()) * 2.0 * double(rows * cols * tokens) * 1e-9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FewTokensOneCore)
    ->ArgsProduct({{512}, {1, 2, 3, 4, 8}, {1, 2, 3, 4}})
    ->ArgsProduct({{256}, {1, 4, 8}, {0}})
    ->UseRealTime();
BENCHMARK(BM_TransposedBF16)->Args({16, 64, 256})->Args({16, 128, 512})->UseRealTime();
BENCHMARK(BM_ReadBandwidth4Streams)->UseRealTime();
// rows, cols, tokens: small's dense up-projection and one routed expert, one of mini's (512 x
// 1024); 1 token (decode), 2-3 (a routed expert's tokens in a batch of 8 decodes; the expert at
// 4 and 8 too: the AVX2 4-bit panels' calls of up to 4 tokens), 8 (batched decode), 4 and 15
// (the FP8 / INT8 fused dots' largest group and count; with 6, 12 and 16 the AVX2 packed GEMM's
// blocks of up to 6 tokens), 48 (an expert's share of a 512-token prefill), 128 and 512
// (prefill); the dense down-projection and an expert gate of DeepSeek-V3 (7168 columns: rows
// longer than one AMX column chunk) at 512; mini's absorbed W_UK^T and W_UV of 16 heads (64 and
// 256 columns) at 8 tokens (batched decode); mini's and small's kv_b_proj expanding 2048 cached
// latents (fp32 random activations here: latents from a bf16 cache take the one-term AMX path).
void linear_shapes(benchmark::internal::Benchmark* bench) {
  bench->Args({5632, 2048, 1})
      ->Args({768, 2048, 1})
      ->Args({768, 2048, 2})
      ->Args({768, 2048, 3})
      ->Args({768, 2048, 4})
      ->Args({768, 2048, 8})
      ->Args({2048, 768, 1})
      ->Args({512, 1024, 1})
      ->Args({512, 1024, 3})
      ->Args({4096, 64, 8})
      ->Args({1024, 256, 8})
      ->Args({5632, 2048, 8})
      ->Args({5632, 2048, 4})
      ->Args({5632, 2048, 5})
      ->Args({5632, 2048, 6})
      ->Args({5632, 2048, 12})
      ->Args({5632, 2048, 15})
      ->Args({5632, 2048, 16})
      ->Args({768, 2048, 48})
      ->Args({5632, 2048, 128})
      ->Args({5632, 2048, 512})
      ->Args({2048, 5632, 512})
      ->Args({2048, 7168, 512})
      ->Args({2048, 256, 2048})
      ->Args({4096, 512, 2048})
      ->UseRealTime();
}
BENCHMARK(BM_BF16)->Apply(linear_shapes);
BENCHMARK(BM_BF16Panels)->Apply(linear_shapes);
BENCHMARK(BM_BF16PanelsTerms)
    ->ArgsProduct({{5632}, {2048}, {16, 48, 128, 512}, {1, 2}})
    ->ArgsProduct({{5632}, {2048}, {1, 2, 3, 8}, {1}})
    ->ArgsProduct({{512}, {1024}, {1, 3}, {1}})
    ->Args({768, 2048, 1, 1})
    ->Args({2048, 768, 1, 1})
    ->Args({2048, 7168, 512, 1})
    ->Args({2048, 7168, 512, 2})
    ->UseRealTime();
BENCHMARK(BM_FP8)->Apply(linear_shapes);
BENCHMARK(BM_INT8)->Apply(linear_shapes);
BENCHMARK(BM_INT8Group32)->Apply(linear_shapes);
BENCHMARK(BM_INT4)->Apply(linear_shapes);
BENCHMARK(BM_MXFP4)->Apply(linear_shapes);
BENCHMARK(BM_INT4Panels)->Apply(linear_shapes);
BENCHMARK(BM_MXFP4Panels)->Apply(linear_shapes);

}  // namespace
}  // namespace mlaserve
