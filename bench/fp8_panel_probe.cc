// Timing probe of a layout mlaserve does not have (docs/benchmarks.md): FP8 E4M3
// codes stored as 16-row panels, [panel][column][16 rows], so that a few-token step widens each
// column of 16 rows once (E4M3 -> binary16 -> fp32, as block_scaled_dot.cc does) for all T
// tokens, whose activations are broadcast, with a scale per 128 columns. It times the loop only;
// its sums are not checked. Compare with linear_bench's BM_FP8 at the same shape and tokens.
//   build/bench/fp8_panel_probe --benchmark_repetitions=3 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <random>
#include <vector>

#include "base/thread_pool.h"

namespace mlaserve {
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
constexpr int64_t kPanelRows = 16, kScaleCols = 128;

__m512 widen_column(const uint8_t* codes) {
  const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(0xbfff))));
}

// One panel's 16 rows against T tokens (x: [token][cols]); out: [token][16].
template <int T>
void panel_dot(const uint8_t* codes, const float* scales, const float* x, int64_t cols, float* out) {
  __m512 total[T];
  for (auto& t : total) t = _mm512_setzero_ps();
  for (int64_t b = 0; b < cols; b += kScaleCols) {
    __m512 acc[T];
    for (auto& a : acc) a = _mm512_setzero_ps();
    for (int64_t c = b; c < b + kScaleCols; ++c) {
      const __m512 w = widen_column(codes + c * kPanelRows);
#pragma GCC unroll 16
      for (int t = 0; t < T; ++t) acc[t] = _mm512_fmadd_ps(w, _mm512_set1_ps(x[t * cols + c]), acc[t]);
    }
    for (int t = 0; t < T; ++t) total[t] = _mm512_fmadd_ps(acc[t], _mm512_set1_ps(scales[b / kScaleCols]), total[t]);
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + t * kPanelRows, total[t]);
}

// Args: rows, cols. Copies of the weight fill 1 GB, so the codes come from memory, as in
// linear_bench's decode-sized batches.
template <int T>
void BM_Fp8PanelProbe(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), panels = rows / kPanelRows;
  const int64_t weight_bytes = rows * cols, copies = std::max<int64_t>(1, (int64_t(1) << 30) / weight_bytes);
  std::vector<uint8_t> codes(size_t(weight_bytes * copies));
  std::mt19937 rng(7);
  for (auto& code : codes) code = uint8_t(rng()) & 0x77;  // finite, |x| < 256
  const std::vector<float> scales(size_t(panels * cols / kScaleCols), 0.001f);
  std::vector<float> x(size_t(T * cols)), out(size_t(rows * T));
  for (auto& v : x) v = float(int(rng() % 2001) - 1000) / 1000.0f;
  int64_t copy = 0;
  for (auto _ : state) {
    const uint8_t* weight = codes.data() + copy * weight_bytes;
    copy = (copy + 1) % copies;
    thread_pool().parallel_for(panels, [&](int64_t begin, int64_t end, int) {
      for (int64_t p = begin; p < end; ++p)
        panel_dot<T>(weight + p * kPanelRows * cols, scales.data() + p * (cols / kScaleCols), x.data(), cols,
                     out.data() + p * kPanelRows * T);
    });
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(2 * rows * cols * T) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Fp8PanelProbe<4>)->Args({5632, 2048})->UseRealTime();
BENCHMARK(BM_Fp8PanelProbe<8>)->Args({5632, 2048})->UseRealTime();
BENCHMARK(BM_Fp8PanelProbe<12>)->Args({5632, 2048})->UseRealTime();
BENCHMARK(BM_Fp8PanelProbe<15>)->Args({5632, 2048})->UseRealTime();
#endif

}  // namespace
}  // namespace mlaserve
BENCHMARK_MAIN();
