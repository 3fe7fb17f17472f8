// Prefill attention (expanded MLA, causal) at a layer's shape: all queries of a prompt against
// themselves, on fp32 or bf16 panels (small: 16 heads, 512 tokens, 192 / 128).
//   build/bench/attention_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/attention.h"
#include "kernels/bf16_dot_gemm.h"

namespace mlaserve {
namespace {

// Args: heads, tokens, qk_head_dim, v_head_dim, and 1 for the bf16 panels (vdpbf16ps, as with
// --bf16-terms 1 without AMX) or 0 for the fp32 ones.
void BM_CausalAttention(benchmark::State& state) {
  const int64_t heads = state.range(0), tokens = state.range(1), qk_dim = state.range(2), v_dim = state.range(3);
  const bool bf16 = state.range(4) == 1;
  if (bf16 && !bf16_dot_gemm_built()) return state.SkipWithError("no AVX512_BF16 in this build");
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(size_t(tokens * heads * qk_dim)), out(size_t(tokens * heads * v_dim));
  std::vector<float> k(size_t(heads * key_panels_floats(tokens, qk_dim))),
      v(size_t(heads * value_panels_floats(tokens, v_dim)));
  std::vector<uint16_t> k_pairs(size_t(heads * key_pair_panels_words(tokens, qk_dim)));
  std::vector<uint16_t> v_pairs(size_t(heads * value_pair_panels_words(tokens, v_dim)));
  for (auto* values : {&q, &k, &v})  // the panels' layout does not matter to the speed
    for (auto& x : *values) x = normal(rng);
  for (auto* pairs : {&k_pairs, &v_pairs})
    for (auto& x : *pairs) x = f32_to_bf16(normal(rng));
  CausalAttentionParams params;
  params.q = q.data();
  params.k_panels = bf16 ? nullptr : k.data();
  params.v_panels = bf16 ? nullptr : v.data();
  params.k_pairs = bf16 ? k_pairs.data() : nullptr;
  params.v_pairs = bf16 ? v_pairs.data() : nullptr;
  params.out = out.data();
  params.n_queries = params.n_keys = tokens;
  params.n_heads = heads;
  params.head_dim_qk = qk_dim;
  params.head_dim_v = v_dim;
  params.softmax_scale = 0.07f;
  for (auto _ : state) {
    causal_attention(params);
    benchmark::DoNotOptimize(out.data());
  }
  // q.k and p.v over the visible keys: tokens (tokens + 1) / 2 pairs a head.
  const double flops = 2.0 * double(heads) * double(qk_dim + v_dim) * double(tokens) * double(tokens + 1) / 2.0;
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(state.iterations()) * flops * 1e-9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_CausalAttention)
    ->ArgsProduct({{16}, {512, 1024}, {192}, {128}, {0, 1}})
    ->Args({16, 128, 96, 64, 0})
    ->Args({16, 128, 96, 64, 1})
    ->UseRealTime();

}  // namespace
}  // namespace mlaserve
