#include "kernels/quant_dot.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

// MXFP4: twice the E2M1 value of each code (bit 3 the sign) plus 12, so every weight is an
// integer in [0, 24] that vpmaddubsw can take unsigned; the 2 goes into the block scale and
// the 12 into the block-sum correction. INT4 nibbles are already unsigned (value + 8).
constexpr uint8_t kE2M1DoubledPlus12[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr int kInt4Offset = 8, kMxfp4Offset = 12;

// 2^(e - 127) / 2 for every E8M0 exponent e: the MXFP4 block scale with the halving above.
const std::array<float, 256>& e8m0_half_scales() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> out{};
    for (int e = 0; e < 256; ++e) out[size_t(e)] = std::ldexp(1.0f, e - 128);
    return out;
  }();
  return table;
}

// Where quantize_q8 stores column c (< 32) of block `block` out of `blocks`.
int64_t q8_index(int64_t blocks, int64_t block, int c) {
  const int64_t pair_start = block / 2 * 2 * kQ8Block;
  if (block / 2 * 2 + 1 < blocks) return pair_start + (c % 2) * 32 + (block % 2) * 16 + c / 2;
  return pair_start + (c % 2) * 16 + c / 2;  // the last, unpaired block
}

// out[r * kTokens + t] = sum_c (u_c - offset) * w_scale(r, c) * x[t]_c over kRows rows of 4-bit
// weights stored as 16 bytes a block, u_c the unsigned weight of nibble c (through `table` when
// given). Two blocks at a time: their low nibbles against the 32 even-column activations, high
// nibbles against the odd; the weights are decoded once for all kTokens tokens. Each (row,
// token) sum runs in the same order whatever kRows is, so 4 rows at once give the bits of 1.
template <int kRows, int kTokens, class BlockScale>
void dot_4bit_q8(const uint8_t* const bytes[kRows], const uint8_t* table, int offset, BlockScale block_scale,
                 const Q8Activations* x, int64_t cols, float* out) {
  const int64_t blocks = cols / kQ8Block;
  int64_t block = 0;
  float total[kRows * kTokens] = {}, sum_correction[kRows * kTokens] = {};
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc[kRows * kTokens], correction[kRows * kTokens];
#pragma GCC unroll 4
  for (int i = 0; i < kRows * kTokens; ++i) acc[i] = correction[i] = _mm256_setzero_ps();
  const __m256i low_mask = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  const __m256i lookup =
      table ? _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table))) : low_mask;
  for (; block + 2 <= blocks; block += 2) {
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes[r] + block * 16));
      __m256i even = _mm256_and_si256(raw, low_mask), odd = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low_mask);
      if (table) {
        even = _mm256_shuffle_epi8(lookup, even);
        odd = _mm256_shuffle_epi8(lookup, odd);
      }
      const __m256 w_scale = _mm256_set_m128(_mm_set1_ps(block_scale(r, block + 1)), _mm_set1_ps(block_scale(r, block)));
#pragma GCC unroll 4
      for (int t = 0; t < kTokens; ++t) {
        // u <= 24 and |x| <= 127: each 16-bit sum of the two products is within +-12192.
        const auto* q = reinterpret_cast<const __m256i*>(x[t].values + block * kQ8Block);
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(even, _mm256_loadu_si256(q)),
                                               _mm256_maddubs_epi16(odd, _mm256_loadu_si256(q + 1)));
        const __m256 scale = _mm256_mul_ps(w_scale, _mm256_loadu_ps(x[t].scales8 + block * 4));
        const int i = r * kTokens + t;
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones)), scale, acc[i]);
        correction[i] = _mm256_fmadd_ps(w_scale, _mm256_loadu_ps(x[t].scaled_sums8 + block * 4), correction[i]);
      }
    }
  }
  for (int i = 0; i < kRows * kTokens; ++i) total[i] = simd::hsum(acc[i]), sum_correction[i] = simd::hsum(correction[i]);
#endif
  for (; block < blocks; ++block)
    for (int r = 0; r < kRows; ++r) {
      const uint8_t* block_bytes = bytes[r] + block * 16;
      const float w_scale = block_scale(r, block);
      for (int t = 0; t < kTokens; ++t) {
        int32_t sum = 0;
        for (int c = 0; c < kQ8Block; ++c) {
          const int code = (block_bytes[c / 2] >> (4 * (c % 2))) & 0xf;
          sum += (table ? table[code] : code) * x[t].values[q8_index(blocks, block, c)];
        }
        total[r * kTokens + t] += float(sum) * (w_scale * x[t].scales[block]);
        sum_correction[r * kTokens + t] += w_scale * x[t].scaled_sums[block];
      }
    }
  for (int i = 0; i < kRows * kTokens; ++i) out[i] = total[i] - float(offset) * sum_correction[i];
}

// dot_4bit_q8 for one row and n_tokens in 1..kQ8MaxTokens, or 4 rows and one token.
template <class BlockScale>
void dot_4bit_q8_tokens(const uint8_t* const* bytes, int n_rows, const uint8_t* table, int offset,
                        BlockScale block_scale, const Q8Activations* x, int64_t n_tokens, int64_t cols, float* out) {
  MLA_CHECK(n_rows == 1 || (n_rows == 4 && n_tokens == 1), "4-bit dot: {} rows x {} tokens is not a supported block",
            n_rows, n_tokens);
  if (n_rows == 4) return dot_4bit_q8<4, 1>(bytes, table, offset, block_scale, x, cols, out);
  switch (n_tokens) {
    case 1: return dot_4bit_q8<1, 1>(bytes, table, offset, block_scale, x, cols, out);
    case 2: return dot_4bit_q8<1, 2>(bytes, table, offset, block_scale, x, cols, out);
    case 3: return dot_4bit_q8<1, 3>(bytes, table, offset, block_scale, x, cols, out);
    default: return dot_4bit_q8<1, 4>(bytes, table, offset, block_scale, x, cols, out);
  }
}

// rounded[i] = x[i] * 127 / amax rounded half to even for one block of 32; returns amax.
float round_block(const float* x, int32_t* rounded) {
#if defined(__AVX2__)
  // max(|x|, running): vmaxps returns its second operand when either is NaN, so a NaN value is
  // skipped, as std::max(running, |x|) skips it in the scalar loop.
  const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax8 = _mm256_setzero_ps();
  for (int i = 0; i < kQ8Block; i += 8) amax8 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), magnitude_bits), amax8);
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

}  // namespace

void round_to_q8(const float* x, int64_t cols, float* out) {
  alignas(32) int32_t rounded[kQ8Block];
  for (int64_t begin = 0; begin < cols; begin += kQ8Block) {
    const float scale = round_block(x + begin, rounded) / 127.0f;
    for (int i = 0; i < kQ8Block; ++i) out[begin + i] = float(rounded[i]) * scale;
  }
}

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
      int32_t sum = 0;
      for (int c = 0; c < kQ8Block; ++c) {
        values[q8_index(blocks, block, c)] = int8_t(rounded[c]);
        sum += rounded[c];
      }
      scales[block] = amax / 127.0f;
      scaled_sums[block] = scales[block] * float(sum);
    }
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int64_t block = lane / 8 * 2 + lane % 8 / 4;
      scales8_[size_t(t * lanes + lane)] = scales[block];
      scaled_sums8_[size_t(t * lanes + lane)] = scaled_sums[block] / 4.0f;
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
  // Groups are powers of two in practice: a shift, not a division, per block.
  const int64_t blocks_per_group = group / kQ8Block;
  const bool power_of_two = (blocks_per_group & (blocks_per_group - 1)) == 0;
  const int shift = std::countr_zero(uint64_t(blocks_per_group));
  auto block_scale = [&](int row, int64_t block) {
    return bf16_to_f32(w_scales[row][power_of_two ? block >> shift : block / blocks_per_group]);
  };
  const uint8_t* bytes[4];
  for (int r = 0; r < n_rows; ++r) bytes[r] = reinterpret_cast<const uint8_t*>(words[r]);
  dot_4bit_q8_tokens(bytes, n_rows, nullptr, kInt4Offset, block_scale, x, n_tokens, cols, out);
}

void dot_mxfp4_q8(const uint8_t* const bytes[], const uint8_t* const e8m0[], int n_rows, const Q8Activations* x,
                  int64_t n_tokens, int64_t cols, float* out) {
  const auto& half_scales = e8m0_half_scales();
  auto block_scale = [&](int row, int64_t block) { return half_scales[e8m0[row][block]]; };
  dot_4bit_q8_tokens(bytes, n_rows, kE2M1DoubledPlus12, kMxfp4Offset, block_scale, x, n_tokens, cols, out);
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// 16 E4M3 codes -> binary16 by moving the fields: exponent and mantissa up by 7, the sign to
// bit 15. Sign-extending the code to 16 bits and shifting left by 7 does both, but leaves a
// copy of the sign in bit 14 (the top exponent bit, which E4M3's 4-bit exponent never sets):
// cleared by the mask. The result is the value / 2^8 (the exponent biases are 7 and 15),
// subnormals included.
inline __m256i fp8x16_to_half(const uint8_t* codes) {
  const __m256i v = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  return _mm256_and_si256(_mm256_slli_epi16(v, 7), _mm256_set1_epi16(int16_t(0xbfff)));
}
#endif

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

namespace {

// out[r] = sum_c E4M3(codes[r][c]) * x[c] for kRows rows read together; each row summed in the
// same order whatever kRows is.
template <int kRows>
void dot_fp8_rows(const uint8_t* const codes[kRows], const float* x, int64_t n, float* out) {
  int64_t i = 0;
  float total[kRows] = {};
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
  __m256 acc0[kRows], acc1[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    __asm__("" : "+x"(x0), "+x"(x1));  // pinned, as in simd::dot_4xn
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256i half = fp8x16_to_half(codes[r] + i);
      acc0[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(half)), x0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(half, 1)), x1, acc1[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) total[r] = simd::hsum(_mm256_add_ps(acc0[r], acc1[r])) * 256.0f;
#endif
  const float* table = fp8_e4m3_table();
  for (int r = 0; r < kRows; ++r) {
    for (int64_t c = i; c < n; ++c) total[r] += table[codes[r][c]] * x[c];
    out[r] = total[r];
  }
}

}  // namespace

float dot_fp8_f32(const uint8_t* codes, const float* x, int64_t n) {
  float out;
  dot_fp8_rows<1>(&codes, x, n, &out);
  return out;
}

void dot_fp8_f32_x4(const uint8_t* const codes[4], const float* x, int64_t n, float out[4]) {
  dot_fp8_rows<4>(codes, x, n, out);
}

}  // namespace mlaserve
