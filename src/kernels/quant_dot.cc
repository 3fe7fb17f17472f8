#include "kernels/quant_dot.h"

#include <cmath>
#include <cstring>

#include "base/dtype.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint32_t load_word(const uint8_t* p) {
  uint32_t word;
  std::memcpy(&word, p, 4);
  return word;
}

#if defined(__AVX2__) && defined(__FMA__)
// The 8 nibbles of `word` as 8 int32 lanes, lane c = nibble c.
inline __m256i nibbles(uint32_t word) {
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(word)), shifts), _mm256_set1_epi32(0xf));
}
#endif

}  // namespace

float dot_int4_row(const uint32_t* words, const uint16_t* scales, int64_t group, const float* x, int64_t cols) {
  float total = 0.0f;
  int64_t c = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 sum = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi32(8);
  for (; c < cols; c += group) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = c; i < c + group; i += 8) {
      const __m256 q = _mm256_cvtepi32_ps(_mm256_sub_epi32(nibbles(words[i / 8]), eight));
      acc = _mm256_fmadd_ps(q, _mm256_loadu_ps(x + i), acc);
    }
    sum = _mm256_fmadd_ps(acc, _mm256_set1_ps(bf16_to_f32(scales[c / group])), sum);
  }
  total = simd::hsum(sum);
#endif
  for (; c < cols; ++c) total += float(int((words[c / 8] >> (4 * (c % 8))) & 0xf) - 8) * bf16_to_f32(scales[c / group]) * x[c];
  return total;
}

float dot_mxfp4_row(const uint8_t* bytes, const uint8_t* e8m0, const float* x, int64_t cols) {
  float total = 0.0f;
  int64_t c = 0;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 sum = _mm256_setzero_ps();
  const __m256 table = _mm256_loadu_ps(kE2M1);
  const __m256i magnitude_mask = _mm256_set1_epi32(7), sign_bit = _mm256_set1_epi32(8);
  for (; c < cols; c += 32) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = c; i < c + 32; i += 8) {
      const __m256i code = nibbles(load_word(bytes + i / 2));
      const __m256 magnitude = _mm256_permutevar8x32_ps(table, _mm256_and_si256(code, magnitude_mask));
      // Bit 3 of the code is the sign: move it to bit 31 and flip the value's sign with it.
      const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, sign_bit), 28);
      const __m256 value = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(magnitude), sign));
      acc = _mm256_fmadd_ps(value, _mm256_loadu_ps(x + i), acc);
    }
    sum = _mm256_fmadd_ps(acc, _mm256_set1_ps(std::ldexp(1.0f, int(e8m0[c / 32]) - 127)), sum);
  }
  total = simd::hsum(sum);
#endif
  for (; c < cols; ++c) {
    const int code = (bytes[c / 2] >> (4 * (c % 2))) & 0xf;
    const float value = code & 8 ? -kE2M1[code & 7] : kE2M1[code & 7];
    total += value * std::ldexp(1.0f, int(e8m0[c / 32]) - 127) * x[c];
  }
  return total;
}

}  // namespace mlaserve
