#include "kernels/quant_dot.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

const std::array<float, 256>& e8m0_half_scales() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> out{};
    for (int e = 0; e < 256; ++e) out[size_t(e)] = std::ldexp(1.0f, e - 128);
    return out;
  }();
  return table;
}

namespace {

// A 4-bit format's block scales as dot_4bit_q8 reads them: one(row, block), and, with AVX2,
// pair(row, block) for an even block: its scale in lanes 0-3, block + 1's in lanes 4-7.
// ScalarScales makes the pair from two calls of a scalar function (4 ops each: a load, a
// shift, a move to a vector register and a broadcast); the INT4 ones below load the pair
// directly.
template <class One>
struct ScalarScales {
  One one;
#if defined(__AVX2__)
  __m256 pair(int row, int64_t block) const {
    return _mm256_set_m128(_mm_set1_ps(one(row, block + 1)), _mm_set1_ps(one(row, block)));
  }
#endif
};

// INT4 groups of 32 columns: each block its own BF16 scale.
struct Int4BlockScales {
  const uint16_t* const* w_scales;
  float one(int row, int64_t block) const { return bf16_to_f32(w_scales[row][block]); }
#if defined(__AVX2__)
  __m256 pair(int row, int64_t block) const {
    // The two BF16 in every dword (a broadcast load), then one in-lane byte shuffle moving the
    // first into the high halves of lanes 0-3 and the second into those of lanes 4-7, the low
    // halves zeroed: their fp32 bits. One vector operation where a move, an unpack and a
    // cross-lane permute took three.
    float two_bf16;
    std::memcpy(&two_bf16, w_scales[row] + block, 4);
    const __m256i both = _mm256_castps_si256(_mm256_set1_ps(two_bf16));
    const __m256i spread = _mm256_setr_epi8(-1, -1, 0, 1, -1, -1, 0, 1, -1, -1, 0, 1, -1, -1, 0, 1,  //
                                            -1, -1, 2, 3, -1, -1, 2, 3, -1, -1, 2, 3, -1, -1, 2, 3);
    return _mm256_castsi256_ps(_mm256_shuffle_epi8(both, spread));
  }
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // Blocks block..block + 3 at once (the VNNI step's scale_quad; block + 3 is in the row): the
  // four BF16 loaded as one 8-byte word, one word permute moving each into the high halves of
  // its 4 lanes, the low halves zeroed (its fp32 bits): two operations.
  __m512 quad(int row, int64_t block) const {
    const __m128i four = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w_scales[row] + block));
    const __m512i word_of_lane = _mm512_set_epi16(3, 0, 3, 0, 3, 0, 3, 0, 2, 0, 2, 0, 2, 0, 2, 0, 1, 0, 1, 0, 1, 0, 1,
                                                  0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xaaaaaaaau, word_of_lane, _mm512_zextsi128_si512(four)));
  }
#endif
};

// INT4 groups of a power of two of 64 columns or more: a pair of blocks shares one scale.
struct Int4GroupScales {
  const uint16_t* const* w_scales;
  int shift;  // log2(blocks per group)
  float one(int row, int64_t block) const { return bf16_to_f32(w_scales[row][block >> shift]); }
#if defined(__AVX2__)
  __m256 pair(int row, int64_t block) const {
    // The BF16 in both halves of every dword; the low half cleared leaves its fp32 bits.
    const __m256i both = _mm256_set1_epi16(int16_t(w_scales[row][block >> shift]));
    return _mm256_castsi256_ps(_mm256_and_si256(both, _mm256_set1_epi32(int32_t(0xffff0000u))));
  }
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // Blocks block..block + 3 (block a multiple of 4): groups of 128 columns or more give them one
  // scale, groups of 64 two (lanes 0-7 and 8-15).
  __m512 quad(int row, int64_t block) const {
    const uint16_t* first = w_scales[row] + (block >> shift);
    const __m512i low = _mm512_set1_epi32(int32_t(uint32_t(first[0]) << 16));
    if (shift >= 2) return _mm512_castsi512_ps(low);
    return _mm512_castsi512_ps(
        _mm512_mask_blend_epi32(0xff00, low, _mm512_set1_epi32(int32_t(uint32_t(first[1]) << 16))));
  }
#endif
};

// MXFP4: each block's E8M0 exponent e as the float 2^(e - 128) (e8m0_half_scales).
struct Mxfp4Scales {
  const uint8_t* const* e8m0;
  const float* half_scales;  // e8m0_half_scales()
  float one(int row, int64_t block) const { return half_scales[e8m0[row][block]]; }
#if defined(__AVX2__)
  __m256 pair(int row, int64_t block) const {
    return _mm256_set_m128(_mm_set1_ps(one(row, block + 1)), _mm_set1_ps(one(row, block)));
  }
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  // Blocks block..block + 3 computed, not looked up: each exponent byte spread over its 4
  // lanes, 2^(e - 128) built as fp32 bits (exponent field e - 1 for e >= 2; e = 1 and 0 are the
  // subnormals 2^-127 and 2^-128, bits 22 and 21): eight operations, where table lookups and
  // broadcasts take about twenty.
  __m512 quad(int row, int64_t block) const {
    int32_t four;
    std::memcpy(&four, e8m0[row] + block, 4);
    const __m128i spread =
        _mm_shuffle_epi8(_mm_cvtsi32_si128(four), _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
    const __m512i e = _mm512_maskz_cvtepu8_epi32(0xffff, spread);
    const __m512i normal = _mm512_maskz_slli_epi32(0xffff, _mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_maskz_sllv_epi32(0xffff, _mm512_set1_epi32(1 << 21), e);
    const __mmask16 is_normal = _mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(is_normal, subnormal, normal));
  }
#endif
};

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// The 16 lanes of blocks block..block + 3, as the AVX2 step below lays out one pair: the
// scales' own quad where they have one, else two pairs and an insert.
template <class Scales>
__m512 scale_quad(const Scales& scales, int row, int64_t block) {
  if constexpr (requires { scales.quad(row, block); }) return scales.quad(row, block);
  return _mm512_castpd_ps(_mm512_maskz_insertf64x4(0xff,
                                                   _mm512_castps_pd(_mm512_castps256_ps512(scales.pair(row, block))),
                                                   _mm256_castps_pd(scales.pair(row, block + 2)), 1));
}

// Two 32-byte halves, 64 bytes apart, as one vector: the evens (or odds) of two pairs of Q8
// blocks. (The AVX-512 intrinsics here are the zero-masked forms with every lane on: GCC 12's
// plain ones take an undefined source and warn from inside its headers.)
inline __m512i load_two_halves(const int8_t* first) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + 64));
  return _mm512_maskz_inserti64x4(0xff, _mm512_castsi256_si512(low), high, 1);
}

// dot_4bit_q8's AVX-512 VNNI step: 4 blocks at a time, each vpdpbusd summing 4 code x int8
// products into a 32-bit lane with no 16-bit intermediate (a third of the AVX2 step's integer
// operations per weight). Adds blocks [0, 4 * (blocks / 4)) into acc (folded from 16 lanes to
// 8 at the end, so the AVX2 step continues the same sums) and returns the next block.
template <int kRows, int kTokens, bool kLookup, class Scales>
int64_t dot_4bit_q8_vnni(const uint8_t* const bytes[kRows], const uint8_t* table, int offset, const Scales& scales,
                         const Q8Activations* x, int64_t blocks, __m256* acc) {
  __m512 wide[kRows * kTokens];
#pragma GCC unroll 4
  for (int i = 0; i < kRows * kTokens; ++i) wide[i] = _mm512_setzero_ps();
  const __m512i low_mask = _mm512_set1_epi8(0x0f);
  const __m512i lookup =
      kLookup ? _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(table)))
              : low_mask;
  const __m512 minus_offset = _mm512_set1_ps(-float(offset));
  int64_t block = 0;
  // Two steps a loop (faster than one or four); each sum still takes its steps in order.
#pragma GCC unroll 2
  for (; block + 4 <= blocks; block += 4) {
    __m512i q_even[kTokens], q_odd[kTokens];
    __m512 x_scale[kTokens], x_correction[kTokens];
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      q_even[t] = load_two_halves(x[t].values + block * kQ8Block);
      q_odd[t] = load_two_halves(x[t].values + block * kQ8Block + 32);
      x_scale[t] = _mm512_loadu_ps(x[t].scales8 + block * 4);
      x_correction[t] = _mm512_mul_ps(minus_offset, _mm512_loadu_ps(x[t].scaled_sums8 + block * 4));
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m512i raw = _mm512_loadu_si512(bytes[r] + block * 16);
      simd::prefetch_stream(bytes[r] + block * 16);  // one line a step
      __m512i even = _mm512_and_si512(raw, low_mask), odd = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low_mask);
      if constexpr (kLookup) {
        even = _mm512_shuffle_epi8(lookup, even);
        odd = _mm512_shuffle_epi8(lookup, odd);
      }
      const __m512 w_scale = scale_quad(scales, r, block);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        // u <= 24 and |x| <= 127: each lane's 8 products sum within +-24384.
        const __m512i sums =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, q_even[t]), odd, q_odd[t]);
        const int i = r * kTokens + t;
        wide[i] = _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, sums), x_scale[t], x_correction[t]),
                                  w_scale, wide[i]);
      }
    }
  }
  for (int i = 0; i < kRows * kTokens; ++i)
    acc[i] = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(wide[i]), 0)),
                           _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, _mm512_castps_pd(wide[i]), 1)));
  return block;
}
#endif

// out[r * kTokens + t] = sum_c (u_c - offset) * w_scale(r, c) * x[t]_c over kRows rows of 4-bit
// weights stored as 16 bytes a block, u_c the unsigned weight of nibble c (through `table` when
// kLookup, else the nibble itself). Per block b: w_scale(r, b) * (x_scale_b * sum_c u_c q_c -
// offset * x_scale_b * sum_c q_c), the integer sum from vpmaddubsw. Two blocks at a time: their
// low nibbles against the 32 even-column activations, high nibbles against the odd; the
// weights are decoded once for all kTokens tokens, and with one token the activations are
// loaded once for all kRows rows (one accumulator a row leaves the registers for them). Each
// (row, token) sum runs in the same order whatever kRows is, so 4 rows at once give the bits
// of 1.
template <int kRows, int kTokens, bool kLookup, class Scales>
void dot_4bit_q8(const uint8_t* const bytes[kRows], const uint8_t* table, int offset, const Scales& scales,
                 const Q8Activations* x, int64_t cols, float* out) {
  const int64_t blocks = cols / kQ8Block;
  int64_t block = 0;
  float total[kRows * kTokens] = {};
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[kRows * kTokens];
#pragma GCC unroll 4
  for (int i = 0; i < kRows * kTokens; ++i) acc[i] = _mm256_setzero_ps();
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  block = dot_4bit_q8_vnni<kRows, kTokens, kLookup>(bytes, table, offset, scales, x, blocks, acc);
#endif
  const __m256i low_mask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i lookup =
      kLookup ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table))) : low_mask;
  const __m256 minus_offset = _mm256_set1_ps(-float(offset));
  for (; block + 2 <= blocks; block += 2) {
    __m256i q_even[kTokens], q_odd[kTokens];
    __m256 x_scale[kTokens], x_correction[kTokens];
#pragma GCC unroll 4
    for (int t = 0; t < kTokens; ++t) {
      const auto* q = reinterpret_cast<const __m256i*>(x[t].values + block * kQ8Block);
      q_even[t] = _mm256_loadu_si256(q);
      q_odd[t] = _mm256_loadu_si256(q + 1);
      x_scale[t] = _mm256_loadu_ps(x[t].scales8 + block * 4);
      x_correction[t] = _mm256_mul_ps(minus_offset, _mm256_loadu_ps(x[t].scaled_sums8 + block * 4));
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes[r] + block * 16));
      if (block % 4 == 0) simd::prefetch_stream(bytes[r] + block * 16);  // 2 steps a line
      __m256i even = _mm256_and_si256(raw, low_mask), odd = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_mask);
      if constexpr (kLookup) {
        even = _mm256_shuffle_epi8(lookup, even);
        odd = _mm256_shuffle_epi8(lookup, odd);
      }
      const __m256 w_scale = scales.pair(r, block);
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        // u <= 24 and |x| <= 127: each 16-bit sum of the two products is within +-12192.
        const __m256i pairs =
            _mm256_add_epi16(_mm256_maddubs_epi16(even, q_even[t]), _mm256_maddubs_epi16(odd, q_odd[t]));
        const __m256 sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
        const int i = r * kTokens + t;
        acc[i] = _mm256_fmadd_ps(_mm256_fmadd_ps(sum, x_scale[t], x_correction[t]), w_scale, acc[i]);
      }
    }
  }
  for (int i = 0; i < kRows * kTokens; ++i) total[i] = simd::hsum(acc[i]);
#endif
  for (; block < blocks; ++block)
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* block_bytes = bytes[r] + block * 16;
      const float w_scale = scales.one(r, block);
      for (int t = 0; t < kTokens; ++t) {
        int32_t sum = 0;
        for (int c = 0; c < kQ8Block; ++c) {
          const int code = (block_bytes[c / 2] >> (4 * (c % 2))) & 0xf;
          sum += (kLookup ? table[code] : code) * x[t].values[q8_index(blocks, block, c)];
        }
        total[r * kTokens + t] += w_scale * (float(sum) * x[t].scales[block] - float(offset) * x[t].scaled_sums[block]);
      }
    }
  for (int i = 0; i < kRows * kTokens; ++i) out[i] = total[i];
}

// dot_4bit_q8 for one row and n_tokens in 1..kQ8MaxTokens, or 4 rows and one token.
template <bool kLookup, class Scales>
void dot_4bit_q8_tokens(const uint8_t* const* bytes, int n_rows, const uint8_t* table, int offset, const Scales& scales,
                        const Q8Activations* x, int64_t n_tokens, int64_t cols, float* out) {
  MLA_CHECK(n_rows == 1 || (n_rows == 4 && n_tokens <= kQ8QuadTokens),
            "4-bit dot: {} rows x {} tokens is not a supported block", n_rows, n_tokens);
  if (n_rows == 4 && n_tokens == 1) return dot_4bit_q8<4, 1, kLookup>(bytes, table, offset, scales, x, cols, out);
  if (n_rows == 4 && n_tokens == 2) return dot_4bit_q8<4, 2, kLookup>(bytes, table, offset, scales, x, cols, out);
  if (n_rows == 4) return dot_4bit_q8<4, 3, kLookup>(bytes, table, offset, scales, x, cols, out);
  switch (n_tokens) {
    case 1: return dot_4bit_q8<1, 1, kLookup>(bytes, table, offset, scales, x, cols, out);
    case 2: return dot_4bit_q8<1, 2, kLookup>(bytes, table, offset, scales, x, cols, out);
    case 3: return dot_4bit_q8<1, 3, kLookup>(bytes, table, offset, scales, x, cols, out);
    default: return dot_4bit_q8<1, 4, kLookup>(bytes, table, offset, scales, x, cols, out);
  }
}

// rounded[i] = x[i] * 127 / amax rounded half to even for one block of 32; returns amax.
float round_block(const float* x, int32_t* rounded) {
#if defined(__AVX2__)
  // max(|x|, running): vmaxps returns its second operand when either is NaN, so a NaN value is
  // skipped, as std::max(running, |x|) skips it in the scalar loop.
  const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax8 = _mm256_setzero_ps();
  for (int i = 0; i < kQ8Block; i += 8)
    amax8 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude_bits), amax8);
  __m128 amax4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
  amax4 = _mm_max_ps(amax4, _mm_movehl_ps(amax4, amax4));
  const float amax = std::max(_mm_cvtss_f32(amax4), _mm_cvtss_f32(_mm_movehdup_ps(amax4)));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  // vcvtps2dq rounds half to even, as std::nearbyint does in the default rounding mode.
  for (int i = 0; i < kQ8Block; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(rounded + i),
                        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(inverse))));
#else
  float amax = 0.0f;
  for (int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < kQ8Block; ++i) rounded[i] = int32_t(std::nearbyint(x[i] * inverse));
#endif
  return amax;
}

// A block's 32 rounded values (each within +-127) as int8: columns 0, 2, .., 30 to evens[0..15],
// 1, 3, .., 31 to odds[0..15] (the order of the nibbles they meet); returns their sum.
int32_t store_block_q8(const int32_t* rounded, int8_t* evens, int8_t* odds) {
#if defined(__AVX2__)
  __m256i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rounded + 8 * i));
  const __m256i sum8 = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
  // The packs interleave by 128-bit lane, leaving groups of 4 columns in the dword order
  // 0, 8, 16, 24, 4, 12, 20, 28 (in units of columns): the permute restores 0, 4, .., 28.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
  const __m256i natural = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // Per 16-byte lane: its 8 evens, then its 8 odds; then the lanes' evens together.
  const __m256i split_lanes =
      _mm256_shuffle_epi8(natural, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8,
                                                    10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i split = _mm256_permute4x64_epi64(split_lanes, 0xd8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(evens), _mm256_castsi256_si128(split));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(odds), _mm256_extracti128_si256(split, 1));
  const __m128i sum4 = _mm_add_epi32(_mm256_castsi256_si128(sum8), _mm256_extracti128_si256(sum8, 1));
  const __m128i sum2 = _mm_add_epi32(sum4, _mm_shuffle_epi32(sum4, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(sum2, _mm_shuffle_epi32(sum2, 0xb1)));
#else
  int32_t sum = 0;
  for (int c = 0; c < kQ8Block; ++c) {
    (c % 2 ? odds : evens)[c / 2] = int8_t(rounded[c]);
    sum += rounded[c];
  }
  return sum;
#endif
}

}  // namespace

void Q8Buffer::quantize(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols) {
  const int64_t blocks = cols / kQ8Block, lanes = blocks / 2 * 8;
  cols_ = cols;
  values_.resize(size_t(n_tokens * cols));
  scales_.resize(size_t(n_tokens * blocks));
  scaled_sums_.resize(scales_.size());
  scales8_.resize(size_t(n_tokens * lanes));
  scaled_sums8_.resize(scales8_.size());
  alignas(32) int32_t rounded[kQ8Block];
  for (int64_t t = 0; t < n_tokens; ++t) {
    int8_t* values = values_.data() + t * cols;
    float* scales = scales_.data() + t * blocks;
    float* scaled_sums = scaled_sums_.data() + t * blocks;
    for (int64_t block = 0; block < blocks; ++block) {
      const float amax = round_block(x + t * x_stride + block * kQ8Block, rounded);
      // q8_index's layout: in a pair, evens at 16 * (block % 2) and odds 32 further; a last
      // unpaired block's odds right after its evens.
      const int32_t sum =
          store_block_q8(rounded, values + q8_index(blocks, block, 0), values + q8_index(blocks, block, 1));
      scales[block] = amax / 127.0f;
      scaled_sums[block] = scales[block] * float(sum);
      if (block / 2 * 2 + 1 >= blocks) continue;  // unpaired: no vector lanes
      for (int64_t lane = block / 2 * 8 + block % 2 * 4, end = lane + 4; lane < end; ++lane) {
        scales8_[size_t(t * lanes + lane)] = scales[block];
        scaled_sums8_[size_t(t * lanes + lane)] = scaled_sums[block] / 4.0f;
      }
    }
  }
}

Q8Activations Q8Buffer::token(int64_t t) const {
  const int64_t blocks = cols_ / kQ8Block, lanes = blocks / 2 * 8;
  return {values_.data() + t * cols_, scales_.data() + t * blocks, scaled_sums_.data() + t * blocks,
          scales8_.data() + t * lanes, scaled_sums8_.data() + t * lanes};
}

void dot_int4_q8(const uint32_t* const words[], const uint16_t* const w_scales[], int n_rows, int64_t group,
                 const Q8Activations* x, int64_t n_tokens, int64_t cols, float* out) {
  const uint8_t* bytes[4];
  for (int r = 0; r < n_rows; ++r) bytes[r] = reinterpret_cast<const uint8_t*>(words[r]);
  auto run = [&](const auto& scales) {
    dot_4bit_q8_tokens<false>(bytes, n_rows, nullptr, kInt4Offset, scales, x, n_tokens, cols, out);
  };
  // The group's scale index chosen outside the loop: a block's own scale (group 32), a shift
  // (other powers of two), or a division. Branching on it per block cost a fifth of the time.
  const int64_t blocks_per_group = group / kQ8Block;
  if (blocks_per_group == 1) return run(Int4BlockScales{w_scales});
  if ((blocks_per_group & (blocks_per_group - 1)) == 0)
    return run(Int4GroupScales{w_scales, std::countr_zero(uint64_t(blocks_per_group))});
  auto one = [&](int row, int64_t block) { return bf16_to_f32(w_scales[row][block / blocks_per_group]); };
  run(ScalarScales<decltype(one)>{one});
}

void dot_mxfp4_q8(const uint8_t* const bytes[], const uint8_t* const e8m0[], int n_rows, const Q8Activations* x,
                  int64_t n_tokens, int64_t cols, float* out) {
  dot_4bit_q8_tokens<true>(bytes, n_rows, kE2M1DoubledPlus12, kMxfp4Offset,
                           Mxfp4Scales{e8m0, e8m0_half_scales().data()}, x, n_tokens, cols, out);
}

}  // namespace MLASERVE_KERNELS_NS
