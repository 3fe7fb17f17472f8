// Storage dtypes of checkpoint tensors and the scalar conversions to fp32.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace mlaserve {

// safetensors dtype names ("F32", "BF16", "F8_E4M3", ...).
enum class DType { F64, F32, F16, BF16, F8_E4M3, I64, I32, I16, I8, U8, BOOL };

DType dtype_from_name(std::string_view name);  // throws Error naming the unknown dtype
std::string_view dtype_name(DType dtype);
size_t dtype_size(DType dtype);

inline float bf16_to_f32(uint16_t bits) {
  uint32_t widened = uint32_t(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

// An OCP MX E8M0 scale: 2^(e - 127), built from its bits (e = 0 is the denormal 2^-127; e = 255,
// NaN in the spec, gives infinity as std::ldexp(1, 128) would).
inline float e8m0_to_f32(uint8_t e) {
  const uint32_t bits = e == 0 ? 0x00400000u : uint32_t(e) << 23;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Round-to-nearest-even, as torch's .to(torch.bfloat16); NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// FP8 E4M3 "fn" (torch.float8_e4m3fn): bias 7, no infinities, S.1111.111 is NaN, max 448.
float fp8_e4m3_to_f32(uint8_t bits);
uint8_t f32_to_fp8_e4m3(float value);  // round-to-nearest-even, saturating at +-448

// Lookup table of all 256 FP8 E4M3 values, for kernels.
const float* fp8_e4m3_table();

}  // namespace mlaserve
