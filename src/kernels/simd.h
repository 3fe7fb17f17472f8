// Vector primitives used by every kernel, with an AVX-512 path, an AVX2+FMA path and a scalar
// path chosen at compile time (each kernel build, isa.h, compiles its own).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/isa_namespace.h"

namespace MLASERVE_KERNELS_NS::simd {

// The vector units this build compiles for, for the start-up log.
#if defined(__AVX512F__) && defined(__AVX512BF16__) && defined(__AVX512VNNI__)
inline constexpr const char* kUnits = "AVX-512 with BF16 and VNNI";
#elif defined(__AVX512F__)
inline constexpr const char* kUnits = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr const char* kUnits = "AVX2 and FMA";
#else
inline constexpr const char* kUnits = "scalar";
#endif

// Weight streams are also prefetched this far ahead by the one-token kernels: with four streams
// a thread the hardware prefetchers keep too few lines in flight, and 2 KB ahead read faster
// than 1 KB or 512 B. A stream's rows or panels follow each other in memory, so a prefetch past
// one's end fetches the next read.
constexpr int64_t kStreamPrefetchBytes = 2048;

inline void prefetch_stream(const void* position) {
  _mm_prefetch(static_cast<const char*>(position) + kStreamPrefetchBytes, _MM_HINT_T0);
}

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
// The horizontal sums of 4 vectors at once: {sum(a), sum(b), sum(c), sum(d)}.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 sums = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(sums), _mm256_extractf128_ps(sums, 1));
}
// 16 bf16 values as 8 floats from the even ones (the low halves of 32-bit lanes) and 8 from the
// odd ones (the high halves): a shift and a mask, no shuffle (a Bf16Panels pair of columns).
inline void load_bf16_pairs(const uint16_t* p, __m256& evens, __m256& odds) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  evens = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
  odds = _mm256_castsi256_ps(_mm256_and_si256(raw, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
}
// 8 bf16 values -> 8 floats (bf16 is the high half of an f32).
inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
// Lane j holds nibble j of a 32-bit word (columns in the order INT4 words and MXFP4 bytes store
// them: low nibble first), in bits 0-3 with whatever lay above it.
inline __m256i nibbles_x8(uint32_t word) {
  return _mm256_srlv_epi32(_mm256_set1_epi32(int32_t(word)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
}
// Lanes whose bits 0-3 hold an INT4 code (stored as q + 8; the bits above are ignored) as
// (q - 8) * scale, with one rounding; offset = -8 * scale.
inline __m256 int4_lanes_to_f32(__m256i lanes, __m256 scale, __m256 offset) {
  const __m256 codes = _mm256_cvtepi32_ps(_mm256_and_si256(lanes, _mm256_set1_epi32(0xf)));
  return _mm256_fmadd_ps(codes, scale, offset);
}
// The 8 INT4 weights of one word.
inline __m256 int4x8_to_f32(uint32_t word, float scale) {
  return int4_lanes_to_f32(nibbles_x8(word), _mm256_set1_ps(scale), _mm256_set1_ps(-8.0f * scale));
}
// Lanes whose bits 0-3 hold an MXFP4 (E2M1) code (the bits above are ignored) times scale:
// bit 3 the sign, bits 0-2 through the magnitude table (vpermps reads only an index's low 3
// bits).
inline __m256 mxfp4_lanes_to_f32(__m256i lanes, __m256 scale) {
  const __m256 magnitudes = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256 magnitude = _mm256_permutevar8x32_ps(magnitudes, lanes);
  const __m256 sign = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(lanes, 3), 31));  // bit 3 -> 31
  return _mm256_mul_ps(_mm256_or_ps(magnitude, sign), scale);
}
// The 8 MXFP4 weights of 4 bytes.
inline __m256 mxfp4x8_to_f32(uint32_t four_bytes, float scale) {
  return mxfp4_lanes_to_f32(nibbles_x8(four_bytes), _mm256_set1_ps(scale));
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
// e^x for 8 lanes (Cephes expf: x = n ln2 + r, |r| <= ln2 / 2, a degree-5 polynomial for
// e^r, 2^n put into the exponent field); within ~2 ulp of std::exp. x is clamped to
// [-87.3, 88.7], so large negative inputs give ~1e-38 rather than 0.
inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln 2 in two parts, exact first
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}
#endif

// max of x[0, n), n >= 1.
inline float max_of(const float* x, int64_t n) {
  int64_t i = 0;
  float best = x[0];
#if defined(__AVX2__)
  if (n >= 8) {
    __m256 acc = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) acc = _mm256_max_ps(acc, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (float lane : lanes) best = std::max(best, lane);
  }
#endif
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

// x[i] = e^(x[i] - shift); returns the sum of the new values (softmax numerators).
inline float exp_shifted(float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(shift)));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum(acc);
#endif
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i]: the SwiGLU of every
// MLP and expert (HF's hidden_act "silu"), on exp8 (a scalar std::exp per element had taken
// ~4% of a BF16 prefill).
inline void silu_times(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 denominator = _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), g)));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, denominator), _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

#if defined(__AVX512F__)
// 16 bf16 values -> 16 floats. Zero-masked forms: GCC 12's unmasked ones take an undefined
// source and warn -Wmaybe-uninitialized from inside its headers (as in hsum above).
inline __m512 load_bf16x16(const uint16_t* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, raw), 16));
}
inline __m512 load_f32x16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_f32x16(const uint16_t* p) { return load_bf16x16(p); }
// load_bf16_pairs for 32 values: 16 floats from the even ones, 16 from the odd ones.
inline void load_bf16_pairs(const uint16_t* p, __m512& evens, __m512& odds) {
  const __m512i raw = _mm512_loadu_si512(p);
  evens = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, raw, 16));
  odds = _mm512_castsi512_ps(_mm512_maskz_and_epi32(0xffff, raw, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
}
// 16 rows of 16 dwords transposed in place: afterwards words[p] holds dword p of each row in row
// order (an AMX B tile's row of column pair p; MLA decode's bf16 query pairs of 16 heads).
// Pairs of dwords, then of qwords, are interleaved within 128-bit lanes (group g's vector j then
// holds column 4L + j of rows 4g..4g+3 in lane L), then the lanes are gathered across groups.
inline __attribute__((always_inline)) void transpose_16x16(__m512i words[16]) {
  __m512i lanes[16];
  for (int g = 0; g < 4; ++g) {
    const __m512i* in = words + 4 * g;
    const __m512i low01 = _mm512_maskz_unpacklo_epi32(0xffff, in[0], in[1]);
    const __m512i high01 = _mm512_maskz_unpackhi_epi32(0xffff, in[0], in[1]);
    const __m512i low23 = _mm512_maskz_unpacklo_epi32(0xffff, in[2], in[3]);
    const __m512i high23 = _mm512_maskz_unpackhi_epi32(0xffff, in[2], in[3]);
    lanes[4 * g + 0] = _mm512_maskz_unpacklo_epi64(0xff, low01, low23);
    lanes[4 * g + 1] = _mm512_maskz_unpackhi_epi64(0xff, low01, low23);
    lanes[4 * g + 2] = _mm512_maskz_unpacklo_epi64(0xff, high01, high23);
    lanes[4 * g + 3] = _mm512_maskz_unpackhi_epi64(0xff, high01, high23);
  }
  for (int j = 0; j < 4; ++j) {
    // Lanes 0 and 1 (front) or 2 and 3 (back) of groups 0 and 1, then of groups 2 and 3.
    const __m512i front01 = _mm512_maskz_shuffle_i32x4(0xffff, lanes[j], lanes[4 + j], 0x44);
    const __m512i back01 = _mm512_maskz_shuffle_i32x4(0xffff, lanes[j], lanes[4 + j], 0xee);
    const __m512i front23 = _mm512_maskz_shuffle_i32x4(0xffff, lanes[8 + j], lanes[12 + j], 0x44);
    const __m512i back23 = _mm512_maskz_shuffle_i32x4(0xffff, lanes[8 + j], lanes[12 + j], 0xee);
    words[j] = _mm512_maskz_shuffle_i32x4(0xffff, front01, front23, 0x88);
    words[4 + j] = _mm512_maskz_shuffle_i32x4(0xffff, front01, front23, 0xdd);
    words[8 + j] = _mm512_maskz_shuffle_i32x4(0xffff, back01, back23, 0x88);
    words[12 + j] = _mm512_maskz_shuffle_i32x4(0xffff, back01, back23, 0xdd);
  }
}
#endif
#if defined(__AVX2__) && defined(__FMA__)
inline __m256 load_f32x8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_f32x8(const uint16_t* p) { return load_bf16x8(p); }
#endif
inline float to_f32(float value) { return value; }
inline float to_f32(uint16_t bf16) {
  const uint32_t bits = uint32_t(bf16) << 16;
  float value;
  __builtin_memcpy(&value, &bits, 4);
  return value;
}

// sum_i a[i] * b[i] for fp32 or bf16 a (widened in registers: exact, so a bf16 row and its
// fp32 copy give the same bits).
template <class Element>
inline float dot_widened(const Element* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(load_f32x16(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(load_f32x16(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  sum = hsum(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load_f32x8(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(load_f32x8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += to_f32(a[i]) * b[i];
  return sum;
}

// sum_i a[i] * b[i]
inline float dot_f32(const float* a, const float* b, int64_t n) { return dot_widened(a, b, n); }

// sum_i bf16(a[i]) * b[i], in dot_f32's order.
inline float dot_bf16_f32(const uint16_t* a, const float* b, int64_t n) { return dot_widened(a, b, n); }

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

// out[r * kTokens + t] = sum_i w[r][i] * x[t][i] for 4 rows (fp32 or bf16, widened in
// registers) and kTokens (1..3) tokens. With 3 tokens the 12 accumulators, 3 activations and
// one weight fill the 16 AVX2 registers: 7 loads feed 12 FMAs, so the loop runs on the FMA
// units rather than on loads.
template <int kTokens, class Element>
inline void dot_4xn(const Element* const w[4], const float* const x[kTokens], int64_t n, float out[4 * kTokens]) {
  static_assert(kTokens >= 1 && kTokens <= 3);
  int64_t i = 0;
  for (int k = 0; k < 4 * kTokens; ++k) out[k] = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[4 * kTokens];
#pragma GCC unroll 12
  for (auto& a : acc) a = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    // The empty asm pins each loaded value in a register: GCC otherwise folds the load into
    // every FMA that uses it as a memory operand (15 loads for 12 FMAs: load-bound). The
    // activations are named values and the small loops unrolled by pragma: pinned elements of
    // an array are stored to the stack on every step.
    __m256 x0 = _mm256_loadu_ps(x[0] + i), x1 = x0, x2 = x0;
    __asm__("" : "+x"(x0));
    if constexpr (kTokens > 1) {
      x1 = _mm256_loadu_ps(x[1] + i);
      __asm__("" : "+x"(x1));
    }
    if constexpr (kTokens > 2) {
      x2 = _mm256_loadu_ps(x[2] + i);
      __asm__("" : "+x"(x2));
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      __m256 wr = load_f32x8(w[r] + i);
      __asm__("" : "+x"(wr));
      if (i % (64 / sizeof(Element)) == 0) prefetch_stream(w[r] + i);  // once a line
      acc[r * kTokens] = _mm256_fmadd_ps(wr, x0, acc[r * kTokens]);
      if constexpr (kTokens > 1) acc[r * kTokens + 1] = _mm256_fmadd_ps(wr, x1, acc[r * kTokens + 1]);
      if constexpr (kTokens > 2) acc[r * kTokens + 2] = _mm256_fmadd_ps(wr, x2, acc[r * kTokens + 2]);
    }
  }
  for (int k = 0; k < 4 * kTokens; k += 4) _mm_storeu_ps(out + k, hsum4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]));
#endif
  for (; i < n; ++i)
    for (int r = 0; r < 4; ++r)
      for (int t = 0; t < kTokens; ++t) out[r * kTokens + t] += to_f32(w[r][i]) * x[t][i];
}

// y[r][i] += sum_t alpha[r][t] * x[t][i] for 4 outputs r and n_x inputs t (a weighted sum of
// rows into 4 accumulators). 24 columns at a time: 12 accumulators stay in registers while
// every input row passes, 3 row loads and 4 broadcasts feeding 12 FMAs.
inline void weighted_rows_4(const float* const alpha[4], const float* const* x, int64_t n_x, float* const y[4],
                            int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 24 <= n; i += 24) {
    __m256 acc[4 * 3];  // [r * 3 + c]; unrolled loops keep it in registers (see dot_4xn)
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 3
      for (int c = 0; c < 3; ++c) acc[r * 3 + c] = _mm256_loadu_ps(y[r] + i + 8 * c);
    for (int64_t t = 0; t < n_x; ++t) {
      // Named and pinned in registers, not folded into 4 FMAs each (see dot_4xn).
      __m256 row0 = _mm256_loadu_ps(x[t] + i), row1 = _mm256_loadu_ps(x[t] + i + 8),
             row2 = _mm256_loadu_ps(x[t] + i + 16);
      __asm__("" : "+x"(row0), "+x"(row1), "+x"(row2));
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m256 a = _mm256_broadcast_ss(alpha[r] + t);
        acc[r * 3] = _mm256_fmadd_ps(a, row0, acc[r * 3]);
        acc[r * 3 + 1] = _mm256_fmadd_ps(a, row1, acc[r * 3 + 1]);
        acc[r * 3 + 2] = _mm256_fmadd_ps(a, row2, acc[r * 3 + 2]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r)
#pragma GCC unroll 3
      for (int c = 0; c < 3; ++c) _mm256_storeu_ps(y[r] + i + 8 * c, acc[r * 3 + c]);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 acc[4];
    for (int r = 0; r < 4; ++r) acc[r] = _mm256_loadu_ps(y[r] + i);
    for (int64_t t = 0; t < n_x; ++t) {
      const __m256 xt = _mm256_loadu_ps(x[t] + i);
      for (int r = 0; r < 4; ++r) acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(alpha[r] + t), xt, acc[r]);
    }
    for (int r = 0; r < 4; ++r) _mm256_storeu_ps(y[r] + i, acc[r]);
  }
#endif
  for (; i < n; ++i)
    for (int r = 0; r < 4; ++r)
      for (int64_t t = 0; t < n_x; ++t) y[r][i] += alpha[r][t] * x[t][i];
}

#if defined(__AVX2__) && defined(__FMA__)
// acc[r * kVectors + v] (lanes 0-7) += sum_k *at(r, k) * panel_v(k)[lane], where
// load(k, p0, p1) gives the panel's vectors at depth k, k + 1, ..., k + kColumns - 1 (p0[c],
// p1[c]: panel_0(k + c), panel_1(k + c); a BF16 column pair is one load, kColumns 2): the
// register block of the packed GEMM (r a token) and of MLA decode's scores (r a cached row).
// Per column, kVectors panel vectors and kRows broadcasts feed kRows * kVectors FMAs with no
// horizontal sums; 6 x 2 and 12 x 1 keep 12 accumulators, enough to cover the FMA latency.
// Each accumulator adds the columns in order (a lone last column of a pair loader: its first
// only). The panel vectors are named and pinned and every small loop unrolled: GCC otherwise
// folds the loads into each FMA, or keeps the accumulators in memory (see dot_4xn).
template <int kRows, int kVectors, int kColumns, class BroadcastAt, class LoadPanel>
inline void broadcast_times_loaded_panel(BroadcastAt at, LoadPanel load, int64_t depth, __m256* acc) {
  static_assert(kVectors == 1 || kVectors == 2);
  for (int64_t k = 0; k < depth; k += kColumns) {
    __m256 p0[kColumns], p1[kColumns];
    load(k, p0, p1);
#pragma GCC unroll 2
    for (int c = 0; c < kColumns; ++c) {
      if (c > 0 && k + c == depth) break;
      __asm__("" : "+x"(p0[c]));
      if constexpr (kVectors == 2) __asm__("" : "+x"(p1[c]));
#pragma GCC unroll 12
      for (int r = 0; r < kRows; ++r) {
        const __m256 a = _mm256_broadcast_ss(at(r, k + c));
        acc[r * kVectors] = _mm256_fmadd_ps(a, p0[c], acc[r * kVectors]);
        if constexpr (kVectors == 2) acc[r * kVectors + 1] = _mm256_fmadd_ps(a, p1[c], acc[r * kVectors + 1]);
      }
    }
  }
}
#endif

// rows_times_panel's default work between columns: none.
struct NoColumnWork {
  void operator()() const {}
};

// out[r * kWidth + c] = sum_k rows[r][k] * panel[k * kWidth + c], kWidth = 8 * kVectors: kRows
// rows against a column panel stored k-major (a transposed small matrix), on
// broadcast_times_loaded_panel. every_four_columns() is called once per 4 columns, between
// them (a caller's prefetches, spread through the products).
template <int kRows, int kVectors, class ColumnWork = NoColumnWork>
inline void rows_times_panel(const float* const rows[kRows], const float* panel, int64_t depth, float* out,
                             ColumnWork every_four_columns = {}) {
  constexpr int kWidth = 8 * kVectors;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[kRows * kVectors];
#pragma GCC unroll 12
  for (auto& a : acc) a = _mm256_setzero_ps();
  broadcast_times_loaded_panel<kRows, kVectors, 1>([&](int r, int64_t k) { return rows[r] + k; },
                                                   [&](int64_t k, __m256* p0, __m256* p1) {
                                                     if (k % 4 == 0) every_four_columns();
                                                     p0[0] = _mm256_loadu_ps(panel + k * kWidth);
                                                     p1[0] = kVectors == 2 ? _mm256_loadu_ps(panel + k * kWidth + 8)
                                                                           : p0[0];
                                                   },
                                                   depth, acc);
#pragma GCC unroll 12
  for (int r = 0; r < kRows * kVectors; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
#else
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kWidth; ++c) {
      float sum = 0.0f;
      for (int64_t k = 0; k < depth; ++k) sum += rows[r][k] * panel[k * kWidth + c];
      out[r * kWidth + c] = sum;
    }
  for (int64_t k = 0; k < depth; k += 4) every_four_columns();
#endif
}

// out[i] = bf16(x[i]) as fp32. A plain loop: GCC vectorises it 16 values a step with
// unpacks, which measured faster than 8 at a time through vpmovzxwd.
inline void widen_bf16(const uint16_t* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = uint32_t(x[i]) << 16;
    __builtin_memcpy(out + i, &bits, 4);
  }
}

// out[i] = e4m3(codes[i]) * scale, scale a power of two (the product exact). The code's 7
// magnitude bits placed at fp32's bits 20-26 read as the value times 2^-120 (a subnormal code
// as an fp32 subnormal, so every code is exact), then two exact multiplies.
#if defined(__AVX512F__)
inline __m512 fp8_e4m3_times(__m128i codes16, __m512 scale) {
  // maskz forms: GCC 12 warns of the plain ones' undefined passthrough.
  const __m512i codes = _mm512_maskz_cvtepu8_epi32(0xffff, codes16);
  const __m512i magnitude = _mm512_maskz_slli_epi32(0xffff, _mm512_and_si512(codes, _mm512_set1_epi32(0x7f)), 20);
  const __m512i sign = _mm512_maskz_slli_epi32(0xffff, _mm512_and_si512(codes, _mm512_set1_epi32(0x80)), 24);
  const __m512 value = _mm512_castsi512_ps(_mm512_or_si512(magnitude, sign));
  return _mm512_mul_ps(_mm512_mul_ps(value, _mm512_set1_ps(0x1p120f)), scale);
}
#endif
inline void widen_fp8_e4m3(const uint8_t* codes, float scale, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        out + i, fp8_e4m3_times(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)), _mm512_set1_ps(scale)));
#elif defined(__AVX2__)
  for (; i + 8 <= n; i += 8) {
    const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    const __m256i magnitude = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7f)), 20);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    const __m256 value = _mm256_castsi256_ps(_mm256_or_si256(magnitude, sign));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(value, _mm256_set1_ps(0x1p120f)), _mm256_set1_ps(scale)));
  }
#endif
  for (; i < n; ++i) {
    const uint32_t bits = (uint32_t(codes[i] & 0x7f) << 20) | (uint32_t(codes[i] & 0x80) << 24);
    float value;
    __builtin_memcpy(&value, &bits, 4);
    out[i] = value * 0x1p120f * scale;
  }
}

// y[i] += alpha * bf16(x[i])
inline void axpy_bf16(float alpha, const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 a8 = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a8, load_bf16x8(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) {
    const uint32_t bits = uint32_t(x[i]) << 16;
    float value;
    __builtin_memcpy(&value, &bits, 4);
    y[i] += alpha * value;
  }
}

// y[i] += sum_k alpha[k] * bf16(x[k][i]) for 4 rows read together (4 memory streams), y
// loaded and stored once for the 4.
inline void axpy_bf16_x4(const float alpha[4], const uint16_t* const x[4], float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const __m256 a0 = _mm256_set1_ps(alpha[0]), a1 = _mm256_set1_ps(alpha[1]);
  const __m256 a2 = _mm256_set1_ps(alpha[2]), a3 = _mm256_set1_ps(alpha[3]);
  for (; i + 8 <= n; i += 8) {
    if (i % 32 == 0)  // once a line
      for (int r = 0; r < 4; ++r) prefetch_stream(x[r] + i);
    const __m256 first = _mm256_fmadd_ps(a1, load_bf16x8(x[1] + i), _mm256_mul_ps(a0, load_bf16x8(x[0] + i)));
    const __m256 second = _mm256_fmadd_ps(a3, load_bf16x8(x[3] + i), _mm256_mul_ps(a2, load_bf16x8(x[2] + i)));
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_add_ps(first, second)));
  }
#endif
  for (; i < n; ++i) {
    float sum = 0.0f;
    for (int k = 0; k < 4; ++k) sum += alpha[k] * to_f32(x[k][i]);
    y[i] += sum;
  }
}

}  // namespace MLASERVE_KERNELS_NS::simd
