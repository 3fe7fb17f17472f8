#include "kernels/block_scaled_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define MLA_BLOCK_SCALED_AVX512 1
#endif

constexpr int kChunk = 16;  // codes per step: one 128-bit load, one 512-bit or two 256-bit fp32 vectors
// Activations are scaled so their largest magnitude is about 2^64. FP8 weights come out as
// E4M3 * 2^kWeightExponent: with AVX-512 through binary16 (value / 2^8, always an fp32
// normal), on AVX2 by the integer route (value * 2^-120; E4M3 subnormals become fp32
// subnormals, which Intel cores take a microcode assist for in every FMA: AVX-512 avoids
// them). Every product of a nonzero weight (>= 2^-129) and an activation above 2^-61 of the
// largest is a normal fp32, and no product exceeds 2^65 (|E4M3| <= 448 < 2^9). INT8 products
// stay below 2^72.
#ifdef MLA_BLOCK_SCALED_AVX512
constexpr int kWeightExponent = -8;
constexpr float kWeightScale = 0x1p-8f;
#else
constexpr int kWeightExponent = -120;
constexpr float kWeightScale = 0x1p-120f;  // exact: the scaled E4M3 values are fp32 normals or subnormals
#endif
constexpr int kActivationTopExponent = 64;
// Tokens in registers at once (4 rows x 4 tokens of chains; their totals partly spilled), and
// at most in a call (in groups).
#ifdef MLA_BLOCK_SCALED_AVX512
constexpr int kGroupTokens = 4, kMaxTokens = 15;
#else
constexpr int kGroupTokens = 1, kMaxTokens = 1;
#endif

// Position of column j (< 16) of a chunk in BlockScaledActivations' order: with AVX-512 the
// column order; on AVX2 the even columns, then the odd (the order the AVX2 code loop makes).
int chunk_position(int64_t j) {
#ifdef MLA_BLOCK_SCALED_AVX512
  return int(j);
#else
  return int(j % 2 == 0 ? j / 2 : 8 + j / 2);
#endif
}

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

void int8_to_f32(const uint8_t* codes, float scale, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 8 <= n; i += 8) {
    const __m256 values =
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i))));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(values, _mm256_set1_ps(scale)));
  }
#endif
  for (; i < n; ++i) out[i] = float(int8_t(codes[i])) * scale;
}

void BlockScaledActivations::prepare(const float* x, int64_t n, ByteCode code) {
  code_ = code;
  float amax = 0.0f;
  for (int64_t c = 0; c < n; ++c) amax = std::max(amax, std::fabs(x[c]));  // skips NaN
  // Zero, infinite or NaN activations need no range change (the sums are 0, inf or NaN anyway).
  const int exponent = amax > 0.0f && std::isfinite(amax) ? kActivationTopExponent - std::ilogb(amax) : 0;
  const auto [scale_a, scale_b] = power_of_two_factors(exponent);
  unscale_ = power_of_two_factors((code == ByteCode::Fp8E4M3 ? -kWeightExponent : 0) - exponent);
  values_.assign(size_t((n + kChunk - 1) / kChunk * kChunk), 0.0f);
  int64_t c = 0;
  for (; c + kChunk <= n; c += kChunk)  // whole chunks, in a loop GCC vectorises
    for (int64_t j = 0; j < kChunk / 2; ++j) {
      values_[size_t(c + chunk_position(2 * j))] = x[c + 2 * j] * scale_a * scale_b;
      values_[size_t(c + chunk_position(2 * j + 1))] = x[c + 2 * j + 1] * scale_a * scale_b;
    }
  for (; c < n; ++c) values_[size_t(c / kChunk * kChunk + chunk_position(c % kChunk))] = x[c] * scale_a * scale_b;
}

namespace {

// The code of column c as the vector loop computes it (FP8: value * 2^kWeightExponent).
template <ByteCode kCode>
float code_value(uint8_t code) {
  if constexpr (kCode == ByteCode::Fp8E4M3) return fp8_e4m3_table()[code] * kWeightScale;
  return float(int8_t(code));
}

#ifdef MLA_BLOCK_SCALED_AVX512
// 16 codes of a row as one fp32 vector in column order. FP8 through binary16 (fp8x16_to_half);
// INT8 sign-extended to 32 bits and converted. (The all-lanes masked forms: GCC 12's plain
// ones take an undefined source and warn from inside its headers.)
template <ByteCode kCode>
__m512 codes_x16(const uint8_t* codes) {
  if constexpr (kCode == ByteCode::Fp8E4M3) return _mm512_maskz_cvtph_ps(0xffff, fp8x16_to_half(codes));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  return _mm512_maskz_cvtepi32_ps(0xffff, _mm512_maskz_cvtepi8_epi32(0xffff, bytes));
}

// The whole chunks of columns [c, end) of one scale block: total[r * kTokens + t] +=
// scale[r] * row r's sum with token t (one FMA chain a row and token, the same for any
// kTokens). Each chunk's codes are widened once for all the tokens.
template <ByteCode kCode, int kRows, int kTokens>
int64_t block_chunks(const uint8_t* const codes[], const float* const values[], int64_t c, int64_t end,
                     const float* block_scale, __m512 total[]) {
  __m512 acc[kRows * kTokens];
#pragma GCC unroll 16
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (; c + kChunk <= end; c += kChunk) {
    __m512 x[kTokens];
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      x[t] = _mm512_loadu_ps(values[t] + c);
      __asm__("" : "+v"(x[t]));  // pinned, as in simd::dot_4xn
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      if (c % 64 == 0) simd::prefetch_stream(codes[r] + c);  // once a line
      const __m512 weights = codes_x16<kCode>(codes[r] + c);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) acc[r * kTokens + t] = _mm512_fmadd_ps(weights, x[t], acc[r * kTokens + t]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t)
      total[r * kTokens + t] =
          _mm512_fmadd_ps(acc[r * kTokens + t], _mm512_set1_ps(block_scale[r]), total[r * kTokens + t]);
  return c;
}
#elif defined(__AVX2__) && defined(__FMA__)
// 16 codes of a row, sign-extended to 16 bits: a 32-bit lane holds an even column's code in
// its low half, the next odd column's in its high half. Out come the even columns' values and
// the odd columns'. FP8: shifted left 20 (even) or 4 (odd), the code's exponent and mantissa
// sit at fp32's bits 26-20 and a copy of its sign at bit 31; the mask clears the rest. INT8:
// each half shifted down, sign-extending, to a 32-bit integer and converted.
template <ByteCode kCode>
void codes_x16(const uint8_t* codes, __m256& even, __m256& odd) {
  const __m256i pair = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  if constexpr (kCode == ByteCode::Fp8E4M3) {
    const __m256i field_mask = _mm256_set1_epi32(int32_t(0x87f00000u));
    even = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(pair, 20), field_mask));
    odd = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(pair, 4), field_mask));
  } else {
    even = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16));
    odd = _mm256_cvtepi32_ps(_mm256_srai_epi32(pair, 16));
  }
}

template <ByteCode kCode, int kRows, int kTokens>
int64_t block_chunks(const uint8_t* const codes[], const float* const tokens[], int64_t c, int64_t end,
                     const float* block_scale, __m256 total[]) {
  static_assert(kTokens == 1, "AVX2 block-scaled dots take one token (kMaxTokens)");
  const float* values = tokens[0];
  __m256 acc0[kRows], acc1[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (; c + kChunk <= end; c += kChunk) {
    __m256 x0 = _mm256_loadu_ps(values + c), x1 = _mm256_loadu_ps(values + c + 8);
    __asm__("" : "+x"(x0), "+x"(x1));  // pinned, as in simd::dot_4xn
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      if (c % 64 == 0) simd::prefetch_stream(codes[r] + c);  // once a line
      __m256 even, odd;
      codes_x16<kCode>(codes[r] + c, even, odd);
      acc0[r] = _mm256_fmadd_ps(even, x0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(odd, x1, acc1[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r)
    total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc0[r], acc1[r]), _mm256_set1_ps(block_scale[r]), total[r]);
  return c;
}
#endif

// out[r * kTokens + t]: see dot_block_scaled_rows.
template <ByteCode kCode, int kRows, int kTokens>
void dot_rows_of(const uint8_t* const codes[], const float* const scales[], int64_t phase, int64_t block_cols,
                 const BlockScaledActivations* const tokens[], int64_t n, float* out) {
  const float* values[kTokens];
  for (int t = 0; t < kTokens; ++t) values[t] = tokens[t]->values();
  float tail[kRows * kTokens] = {};
  // Columns outside whole aligned chunks (a view's edges, misaligned block boundaries). An
  // explicit fma: left to contraction, GCC fused the sum differently in different kTokens.
  auto scalar = [&](int64_t c, int64_t block) {
    const int64_t at = c / kChunk * kChunk + chunk_position(c % kChunk);
    for (int r = 0; r < kRows; ++r)
      for (int t = 0; t < kTokens; ++t)
        tail[r * kTokens + t] =
            std::fma(code_value<kCode>(codes[r][c]) * values[t][at], scales[r][block], tail[r * kTokens + t]);
  };
#if defined(MLA_BLOCK_SCALED_AVX512) || (defined(__AVX2__) && defined(__FMA__))
#ifdef MLA_BLOCK_SCALED_AVX512
  __m512 total[kRows * kTokens];
#pragma GCC unroll 16
  for (auto& t : total) t = _mm512_setzero_ps();
#else
  __m256 total[kRows * kTokens];
#pragma GCC unroll 4
  for (auto& t : total) t = _mm256_setzero_ps();
#endif
#define MLA_BLOCK_SCALED_VECTOR 1
#endif
  for (int64_t block = 0, block_begin = -phase; block_begin < n; ++block, block_begin += block_cols) {
    const int64_t end = std::min(n, block_begin + block_cols);
    int64_t c = std::max<int64_t>(0, block_begin);
#ifdef MLA_BLOCK_SCALED_VECTOR
    for (; c < end && c % kChunk != 0; ++c) scalar(c, block);
    float block_scale[kRows];
    for (int r = 0; r < kRows; ++r) block_scale[r] = scales[r][block];
    c = block_chunks<kCode, kRows, kTokens>(codes, values, c, end, block_scale, total);
#endif
    for (; c < end; ++c) scalar(c, block);
  }
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTokens; ++t) {
      float sum = tail[r * kTokens + t];
#ifdef MLA_BLOCK_SCALED_VECTOR
      sum += simd::hsum(total[r * kTokens + t]);
#endif
      out[r * kTokens + t] = sum * tokens[t]->unscale()[0] * tokens[t]->unscale()[1];
    }
}

// n_tokens in groups of up to kGroupTokens (balanced: 7 as 3 + 4), each group's codes widened
// again (from L1: the rows' codes were read by the first). Widening FP8 rows once into a
// buffer for all the groups instead runs slower with 128-column scale blocks: each block's few
// chunks do not repay its widening pass, stores and per-group starts.
template <ByteCode kCode>
void dot_rows(const uint8_t* const codes[], const float* const scales[], int n_rows, int64_t phase, int64_t block_cols,
              const BlockScaledActivations* const tokens[], int n_tokens, int64_t n, float* out) {
  using DotRows = void (*)(const uint8_t* const[], const float* const[], int64_t, int64_t,
                           const BlockScaledActivations* const[], int64_t, float*);
#ifdef MLA_BLOCK_SCALED_AVX512
  static constexpr DotRows kDots[2][kGroupTokens] = {
      {dot_rows_of<kCode, 1, 1>, dot_rows_of<kCode, 1, 2>, dot_rows_of<kCode, 1, 3>, dot_rows_of<kCode, 1, 4>},
      {dot_rows_of<kCode, 4, 1>, dot_rows_of<kCode, 4, 2>, dot_rows_of<kCode, 4, 3>, dot_rows_of<kCode, 4, 4>}};
#else
  static constexpr DotRows kDots[2][kGroupTokens] = {{dot_rows_of<kCode, 1, 1>}, {dot_rows_of<kCode, 4, 1>}};
#endif
  const int groups = (n_tokens + kGroupTokens - 1) / kGroupTokens;
  if (groups == 1) return kDots[n_rows == 4][n_tokens - 1](codes, scales, phase, block_cols, tokens, n, out);
  float group_out[4 * kGroupTokens];
  for (int g = 0; g < groups; ++g) {
    const int first = g * n_tokens / groups, count = (g + 1) * n_tokens / groups - first;
    kDots[n_rows == 4][count - 1](codes, scales, phase, block_cols, tokens + first, n, group_out);
    for (int r = 0; r < n_rows; ++r)
      for (int t = 0; t < count; ++t) out[r * n_tokens + first + t] = group_out[r * count + t];
  }
}

}  // namespace

int block_scaled_max_tokens() { return kMaxTokens; }

void dot_block_scaled_rows(const uint8_t* const codes[], const float* const scales[], int n_rows, int64_t phase,
                           int64_t block_cols, const BlockScaledActivations* const tokens[], int n_tokens, int64_t n,
                           float* out) {
  MLA_CHECK(n_rows == 1 || n_rows == 4, "block-scaled dot: {} rows is not a supported block", n_rows);
  MLA_CHECK(n_tokens >= 1 && n_tokens <= kMaxTokens, "block-scaled dot: {} tokens at once (1 to {})", n_tokens,
            kMaxTokens);
  if (tokens[0]->code() == ByteCode::Fp8E4M3)
    return dot_rows<ByteCode::Fp8E4M3>(codes, scales, n_rows, phase, block_cols, tokens, n_tokens, n, out);
  dot_rows<ByteCode::Int8>(codes, scales, n_rows, phase, block_cols, tokens, n_tokens, n, out);
}

}  // namespace MLASERVE_KERNELS_NS
