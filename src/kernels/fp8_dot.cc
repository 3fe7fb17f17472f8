#include "kernels/fp8_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

constexpr int kChunk = 16;  // codes per step: one 128-bit load, two fp32 vectors
// The weights come out as E4M3 * 2^-120; activations are scaled so their largest magnitude is
// about 2^64: every product of a nonzero weight (>= 2^-129) and an activation above 2^-61 of
// the largest is a normal fp32, and no product exceeds 2^-46 (|E4M3| <= 448 < 2^9).
constexpr int kWeightExponent = -120, kActivationTopExponent = 64;
constexpr float kWeightScale = 0x1p-120f;  // exact: the scaled E4M3 values are fp32 normals or subnormals

// Position of column j (< 16) of a chunk in Fp8Activations' order: the even columns, then the
// odd.
int chunk_position(int64_t j) { return int(j % 2 == 0 ? j / 2 : 8 + j / 2); }

// 2^exponent as two floats whose product it is, for |exponent| beyond a float's range:
// multiplying by both is exact.
std::array<float, 2> power_of_two_factors(int exponent) {
  const int half = exponent / 2;
  return {std::ldexp(1.0f, half), std::ldexp(1.0f, exponent - half)};
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// 16 E4M3 codes -> binary16 by moving the fields: exponent and mantissa up by 7, the sign to
// bit 15. Sign-extending the code to 16 bits and shifting left by 7 does both, but leaves a
// copy of the sign in bit 14 (the top exponent bit, which E4M3's 4-bit exponent never sets):
// cleared by the mask. The result is the value / 2^8 (the exponent biases are 7 and 15),
// subnormals included.
__m256i fp8x16_to_half(const uint8_t* codes) {
  const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(0xbfff)));
}
#endif

}  // namespace

void fp8_to_f32(const uint8_t* codes, float scale, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  const __m256 scale_2e8 = _mm256_set1_ps(scale * 256.0f);
  for (; i + 16 <= n; i += 16) {
    const __m256i half = fp8x16_to_half(codes + i);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), scale_2e8));
    _mm256_storeu_ps(out + i + 8, _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), scale_2e8));
  }
#endif
  const float* table = fp8_e4m3_table();
  for (; i < n; ++i) out[i] = table[codes[i]] * scale;
}

void Fp8Activations::prepare(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t c = 0; c < n; ++c) amax = std::max(amax, std::fabs(x[c]));  // skips NaN
  // Zero, infinite or NaN activations need no range change (the sums are 0, inf or NaN anyway).
  const int exponent = amax > 0.0f && std::isfinite(amax) ? kActivationTopExponent - std::ilogb(amax) : 0;
  const auto [scale_a, scale_b] = power_of_two_factors(exponent);
  unscale_ = power_of_two_factors(-kWeightExponent - exponent);
  values_.assign(size_t((n + kChunk - 1) / kChunk * kChunk), 0.0f);
  int64_t c = 0;
  for (; c + kChunk <= n; c += kChunk)  // whole chunks: evens then odds, a loop GCC vectorises
    for (int64_t j = 0; j < kChunk / 2; ++j) {
      values_[size_t(c + j)] = x[c + 2 * j] * scale_a * scale_b;
      values_[size_t(c + kChunk / 2 + j)] = x[c + 2 * j + 1] * scale_a * scale_b;
    }
  for (; c < n; ++c) values_[size_t(c / kChunk * kChunk + chunk_position(c % kChunk))] = x[c] * scale_a * scale_b;
}

namespace {

template <int kRows>
void dot_fp8_rows_of(const uint8_t* const codes[], const float* const scales[], int64_t phase, int64_t block_cols,
                     const Fp8Activations& x, int64_t n, float* out) {
  const float* values = x.values();
  const float* table = fp8_e4m3_table();
  float tail[kRows] = {};
  // Columns outside whole aligned chunks (a view's edges, misaligned block boundaries).
  auto scalar = [&](int64_t c, int64_t block) {
    const float xc = values[c / kChunk * kChunk + chunk_position(c % kChunk)];
    for (int r = 0; r < kRows; ++r)
      tail[r] += table[codes[r][c]] * kWeightScale * xc * scales[r][block];
  };
#if defined(__AVX2__) && defined(__FMA__)
  __m256 total[kRows];
#pragma GCC unroll 4
  for (auto& t : total) t = _mm256_setzero_ps();
  const __m256i field_mask = _mm256_set1_epi32(int32_t(0x87f00000u));
#endif
  for (int64_t block = 0, block_begin = -phase; block_begin < n; ++block, block_begin += block_cols) {
    const int64_t end = std::min(n, block_begin + block_cols);
    int64_t c = std::max<int64_t>(0, block_begin);
#if defined(__AVX2__) && defined(__FMA__)
    for (; c < end && c % kChunk != 0; ++c) scalar(c, block);
    __m256 acc0[kRows], acc1[kRows];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
    for (; c + kChunk <= end; c += kChunk) {
      __m256 x0 = _mm256_loadu_ps(values + c), x1 = _mm256_loadu_ps(values + c + 8);
      __asm__("" : "+x"(x0), "+x"(x1));  // pinned, as in simd::dot_4xn
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        // Each code sign-extended to 16 bits: a 32-bit lane holds an even column's code in
        // its low half, the next odd column's in its high half. Shifted left 20 (even) or 4
        // (odd), the code's exponent and mantissa sit at fp32's bits 26-20 and a copy of its
        // sign at bit 31; the mask clears the rest.
        const __m256i pair = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[r] + c)));
        const __m256 even = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(pair, 20), field_mask));
        const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(pair, 4), field_mask));
        acc0[r] = _mm256_fmadd_ps(even, x0, acc0[r]);
        acc1[r] = _mm256_fmadd_ps(odd, x1, acc1[r]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc0[r], acc1[r]), _mm256_set1_ps(scales[r][block]), total[r]);
#endif
    for (; c < end; ++c) scalar(c, block);
  }
  for (int r = 0; r < kRows; ++r) {
    float sum = tail[r];
#if defined(__AVX2__) && defined(__FMA__)
    sum += simd::hsum(total[r]);
#endif
    out[r] = sum * x.unscale()[0] * x.unscale()[1];
  }
}

}  // namespace

void dot_fp8_rows(const uint8_t* const codes[], const float* const scales[], int n_rows, int64_t phase,
                  int64_t block_cols, const Fp8Activations& x, int64_t n, float* out) {
  MLA_CHECK(n_rows == 1 || n_rows == 4, "FP8 dot: {} rows is not a supported block", n_rows);
  if (n_rows == 4) return dot_fp8_rows_of<4>(codes, scales, phase, block_cols, x, n, out);
  dot_fp8_rows_of<1>(codes, scales, phase, block_cols, x, n, out);
}

}  // namespace mlaserve
