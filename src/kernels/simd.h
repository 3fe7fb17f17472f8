// Vector primitives used by every kernel, with an AVX-512 path, an AVX2+FMA path and a scalar
// path chosen at compile time (-march=native picks the widest the build host has).
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace mlaserve::simd {

#if defined(__AVX512F__)
// Through memory: GCC 12's AVX-512 lane extracts (and _mm512_reduce_add_ps, built on them)
// warn -Wuninitialized from inside its own headers; this runs once per dot product.
inline float hsum(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  float sum = 0.0f;
  for (float lane : lanes) sum += lane;
  return sum;
}
#endif
#if defined(__AVX2__) && defined(__FMA__)
inline float hsum(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  sum = _mm_add_ss(sum, _mm_movehdup_ps(sum));
  return _mm_cvtss_f32(sum);
}
// 8 bf16 values -> 8 floats (bf16 is the high half of an f32).
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
#endif

// sum_i a[i] * b[i]
inline float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  sum = hsum(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// sum_i bf16(a[i]) * b[i]
inline float dot_bf16_f32(const uint16_t* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load_bf16x8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(load_bf16x8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) {
    const uint32_t bits = uint32_t(a[i]) << 16;
    float value;
    __builtin_memcpy(&value, &bits, 4);
    sum += value * b[i];
  }
  return sum;
}

// y[i] += alpha * x[i]
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 a16 = _mm512_set1_ps(alpha);
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(a16, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 a8 = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a8, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// out[r * 2 + t] = sum_i w[r][i] * x[t][i] for 4 rows and 2 tokens: each x load feeds 4 FMAs
// and each w load 2, so the block runs on arithmetic rather than loads.
inline void dot_4x2(const float* const w[4], const float* const x[2], int64_t n, float out[8]) {
  int64_t i = 0;
  for (int k = 0; k < 8; ++k) out[k] = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[8];
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x[0] + i), x1 = _mm256_loadu_ps(x[1] + i);
    for (int r = 0; r < 4; ++r) {
      const __m256 wr = _mm256_loadu_ps(w[r] + i);
      acc[2 * r] = _mm256_fmadd_ps(wr, x0, acc[2 * r]);
      acc[2 * r + 1] = _mm256_fmadd_ps(wr, x1, acc[2 * r + 1]);
    }
  }
  for (int k = 0; k < 8; ++k) out[k] = hsum(acc[k]);
#endif
  for (; i < n; ++i)
    for (int r = 0; r < 4; ++r) {
      out[2 * r] += w[r][i] * x[0][i];
      out[2 * r + 1] += w[r][i] * x[1][i];
    }
}

// y[r][i] += sum_t alpha[r][t] * x[t][i] for 4 outputs r and n_x inputs t (a weighted sum of
// rows into 4 accumulators): each x load feeds 4 FMAs and the accumulators stay in registers.
inline void weighted_rows_4(const float* const alpha[4], const float* const* x, int64_t n_x, float* const y[4],
                            int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) {
    __m256 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_loadu_ps(y[r] + i);
    for (int64_t t = 0; t < n_x; ++t) {
      const __m256 xt = _mm256_loadu_ps(x[t] + i);
      for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(alpha[r][t]), xt, acc[r]);
    }
    for (int r = 0; r < 4; ++r) _mm256_storeu_ps(y[r] + i, acc[r]);
  }
#endif
  for (; i < n; ++i)
    for (int r = 0; r < 4; ++r)
      for (int64_t t = 0; t < n_x; ++t) y[r][i] += alpha[r][t] * x[t][i];
}

// y[i] += alpha * bf16(x[i])
inline void axpy_bf16(float alpha, const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 a8 = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a8, load_bf16x8(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) {
    const uint32_t bits = uint32_t(x[i]) << 16;
    float value;
    __builtin_memcpy(&value, &bits, 4);
    y[i] += alpha * value;
  }
}

}  // namespace mlaserve::simd
