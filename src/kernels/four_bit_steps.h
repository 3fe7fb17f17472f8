// The integer steps of 4-bit weights against int8 activations, per ISA, shared by the integer
// GEMM (gemm_4bit.cc) and the panel kernels (four_bit_panels.cc) so both take the same steps
// and float operations: a register of int32 lanes, a lane a row (kFourBitStepRows rows), and
// the operations on it. MLA_FOUR_BIT_STEPS is defined where the build has them (AVX-512 VNNI,
// or AVX2 and FMA). Internal to src/kernels.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/quant_dot.h"

#if (defined(__AVX512VNNI__) && defined(__AVX512BW__)) || (defined(__AVX2__) && defined(__FMA__))
#define MLA_FOUR_BIT_STEPS 1

namespace MLASERVE_KERNELS_NS::four_bit_steps {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
using IntVec = __m512i;
using FloatVec = __m512;
inline IntVec load_ints(const uint8_t* from) { return _mm512_load_si512(from); }
inline void store_ints(uint8_t* to, IntVec v) { _mm512_store_si512(to, v); }
inline IntVec zero_ints() { return _mm512_setzero_si512(); }
inline IntVec add_ints(IntVec a, IntVec b) { return _mm512_add_epi32(a, b); }
inline FloatVec zero_floats() { return _mm512_setzero_ps(); }
inline FloatVec load_floats(const float* from) { return _mm512_load_ps(from); }
inline void store_floats(float* to, FloatVec v) { _mm512_store_ps(to, v); }
inline IntVec low_nibbles(IntVec word) { return _mm512_and_si512(word, _mm512_set1_epi8(0x0f)); }
inline IntVec high_nibbles(IntVec word) { return low_nibbles(_mm512_srli_epi16(word, 4)); }
inline IntVec e2m1_codes(IntVec nibbles) {
  const __m512i table =
      _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1DoubledPlus12)));
  return _mm512_shuffle_epi8(table, nibbles);
}
// INT4 scales: bf16, an fp32's high half.
inline FloatVec int4_scales(const uint8_t* from) {
  const __m256i bf16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, bf16), 16));
}
// MXFP4 scales: an E8M0 exponent e as 2^(e - 128), as e8m0_half_scales() tabulates: exponent
// field e - 1 for e >= 2; e = 1 and 0 are the subnormals 2^-127 and 2^-128, bits 22 and 21.
inline FloatVec mxfp4_scales(const uint8_t* from) {
  const __m512i e = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
  const __m512i normal = _mm512_maskz_slli_epi32(0xffff, _mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i subnormal = _mm512_maskz_sllv_epi32(0xffff, _mm512_set1_epi32(1 << 21), e);
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(2)), subnormal, normal));
}
// A step: each lane's 4 codes times a token's 4 int8 values, summed into the lane's int32 (u
// <= 24 and |q| <= 127: a block's 32 products sum within +-97536).
inline IntVec add_step(IntVec sums, IntVec codes, int32_t four) {
  return _mm512_dpbusd_epi32(sums, codes, _mm512_set1_epi32(four));
}
constexpr int widen_words(bool) { return 4; }  // the sums are int32 already
inline IntVec widened(IntVec sums) { return sums; }
// acc + w_scale * (x_scale * sum - x_offset), the integer GEMM's float steps.
inline FloatVec add_scaled(FloatVec acc, IntVec sum, float x_scale, float x_offset, FloatVec w_scale) {
  const __m512 scaled =
      _mm512_fmsub_ps(_mm512_maskz_cvtepi32_ps(0xffff, sum), _mm512_set1_ps(x_scale), _mm512_set1_ps(x_offset));
  return _mm512_fmadd_ps(scaled, w_scale, acc);
}
#else
using IntVec = __m256i;
using FloatVec = __m256;
inline IntVec load_ints(const uint8_t* from) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(from)); }
inline void store_ints(uint8_t* to, IntVec v) { _mm256_store_si256(reinterpret_cast<__m256i*>(to), v); }
inline IntVec zero_ints() { return _mm256_setzero_si256(); }
inline IntVec add_ints(IntVec a, IntVec b) { return _mm256_add_epi32(a, b); }
inline FloatVec zero_floats() { return _mm256_setzero_ps(); }
inline FloatVec load_floats(const float* from) { return _mm256_load_ps(from); }
inline void store_floats(float* to, FloatVec v) { _mm256_store_ps(to, v); }
inline IntVec low_nibbles(IntVec word) { return _mm256_and_si256(word, _mm256_set1_epi8(0x0f)); }
inline IntVec high_nibbles(IntVec word) { return low_nibbles(_mm256_srli_epi16(word, 4)); }
inline IntVec e2m1_codes(IntVec nibbles) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1DoubledPlus12)));
  return _mm256_shuffle_epi8(table, nibbles);
}
inline FloatVec int4_scales(const uint8_t* from) {
  const __m128i bf16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(from));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
}
inline FloatVec mxfp4_scales(const uint8_t* from) {  // as above
  const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(from)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(1 << 21), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(subnormal, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}
// A step with vpmaddubsw: the 4 products summed in pairs into 16-bit lanes, which hold a block
// of INT4 (at most 8 * 2 * 15 * 127 = 30480) and 2 words of MXFP4 (codes up to 24: 4 * 2 * 24
// * 127 = 24384) before they are widened to the row's int32 (the integer GEMM's AVX2 steps).
inline IntVec add_step(IntVec sums, IntVec codes, int32_t four) {
  sums = _mm256_add_epi16(sums, _mm256_maddubs_epi16(codes, _mm256_set1_epi32(four)));
  asm("" : "+x"(sums));  // each step's sum in its register (as the integer GEMM's AVX2 steps)
  return sums;
}
constexpr int widen_words(bool mxfp4) { return mxfp4 ? 2 : 4; }
inline IntVec widened(IntVec sums) { return _mm256_madd_epi16(sums, _mm256_set1_epi16(1)); }
inline FloatVec add_scaled(FloatVec acc, IntVec sum, float x_scale, float x_offset, FloatVec w_scale) {
  const __m256 scaled = _mm256_fmsub_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(x_scale), _mm256_set1_ps(x_offset));
  return _mm256_fmadd_ps(scaled, w_scale, acc);
}
#endif

// The two steps in a vector of rows' 32-bit words of 8 codes (row i's word in lane i): the low
// nibbles (columns 0, 2, 4, 6) and the high ones, each an unsigned code a byte (MXFP4 through
// kE2M1DoubledPlus12).
struct WordSteps {
  IntVec step[2];
};
template <bool kMxfp4>
WordSteps word_steps(IntVec word) {
  if constexpr (kMxfp4) return {{e2m1_codes(low_nibbles(word)), e2m1_codes(high_nibbles(word))}};
  return {{low_nibbles(word), high_nibbles(word)}};
}

}  // namespace MLASERVE_KERNELS_NS::four_bit_steps

#endif
