#include "kernels/peak_probes.h"

#include <immintrin.h>

#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

#if defined(__AVX512F__)
// Sums the accumulators into a volatile, so that their chains are not optimised away.
void keep_sums(const __m512* acc, int n) {
  float sink = 0;
  for (int i = 0; i < n; ++i) sink += simd::hsum(acc[i]);
  volatile float keep = sink;
  (void)keep;
}
#endif

// Independent accumulators enough to hide the FMA latency on every core met so far: latency
// times FMA pipes is 5 x 2 on Zen 2 (8 chains reach 80% of its peak), 4 x 2 on Zen 3-5 and
// Intel's cores.
constexpr int kFmaChains = 12;

}  // namespace

double fma_chains(int64_t iterations) {
#if defined(__AVX512F__)
  __m512 acc[kFmaChains];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_fmadd_ps(a, mul, add);
  keep_sums(acc, kFmaChains);
  return double(iterations) * kFmaChains * 16 * 2;
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[kFmaChains];
  for (auto& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm256_fmadd_ps(a, mul, add);
  alignas(32) float lanes[8];
  __m256 sum = acc[0];
  for (int k = 1; k < kFmaChains; ++k) sum = _mm256_add_ps(sum, acc[k]);
  _mm256_store_ps(lanes, sum);
  volatile float keep = lanes[0];
  (void)keep;
  return double(iterations) * kFmaChains * 8 * 2;
#else
  float acc[kFmaChains];
  for (auto& a : acc) a = 1.0f;
  for (int64_t i = 0; i < iterations; ++i)
    for (auto& a : acc) a = a * 0.999999f + 1e-7f;
  volatile float keep = acc[0];
  (void)keep;
  return double(iterations) * kFmaChains * 2;
#endif
}

double bf16_dot_chains(int64_t iterations) {
#if defined(__AVX512BF16__)
  __m512 acc[12];
  for (auto& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512bh a_pairs = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  const __m512bh b_pairs = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(1e-4f));
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbf16_ps(a, a_pairs, b_pairs);
  keep_sums(acc, 12);
  return double(iterations) * 12 * 16 * 4;
#else
  (void)iterations;
  return 0;
#endif
}

double int8_dot_chains(int64_t iterations) {
#if defined(__AVX512VNNI__)
  __m512i acc[12];
  for (auto& a : acc) a = _mm512_set1_epi32(1);
  const __m512i a_bytes = _mm512_set1_epi8(3), b_bytes = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iterations; ++i)
#pragma GCC unroll 12
    for (auto& a : acc) a = _mm512_dpbusd_epi32(a, a_bytes, b_bytes);
  __m512i sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, sum);
  volatile int32_t keep = lanes[0];
  (void)keep;
  return double(iterations) * 12 * 16 * 4 * 2;
#else
  (void)iterations;
  return 0;
#endif
}

}  // namespace MLASERVE_KERNELS_NS
