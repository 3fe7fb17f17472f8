// One sampled token from a vocabulary of random logits (normal, sigma 3): temperature 0.7
// alone, with top-p 0.9 (a flat distribution: a nucleus of thousands of tokens), and with
// top-k 50. Args: vocabulary, top_k, top_p x 100.
//   build/bench/sampling_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/sampling.h"

namespace mlaserve {
namespace {

void BM_SampleToken(benchmark::State& state) {
  const int64_t vocab = state.range(0);
  std::vector<float> logits(static_cast<size_t>(vocab));
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& logit : logits) logit = normal(rng);
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = state.range(1);
  params.top_p = float(state.range(2)) / 100.0f;
  for (auto _ : state) benchmark::DoNotOptimize(sample_token(logits.data(), vocab, params, rng));
}

BENCHMARK(BM_SampleToken)
    ->ArgsProduct({{32000, 163840}, {0}, {100, 90}})
    ->Args({32000, 50, 100})
    ->Args({163840, 50, 100})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlaserve
BENCHMARK_MAIN();
