#include "base/dtype.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace mlaserve {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 11> kDTypes = {{
    {DType::F64, "F64", 8},
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F8_E4M3, "F8_E4M3", 1},
    {DType::I64, "I64", 8},
    {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},
    {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes)
    if (entry.dtype == dtype) return entry;
  fail("internal: dtype {} has no entry", int(dtype));
}

}  // namespace

DType dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes)
    if (entry.name == name) return entry.dtype;
  fail("unsupported safetensors dtype '{}'", name);
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
size_t dtype_size(DType dtype) { return info(dtype).size; }

float f16_to_f32(uint16_t bits) {
  const uint32_t sign = (bits >> 15) & 1, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), -24);
  else if (exponent == 31)
    magnitude = mantissa ? NAN : INFINITY;
  else
    magnitude = std::ldexp(float(mantissa | 0x400), int(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

uint16_t f32_to_f16(float value) {
  // Exhaustive round-to-nearest via the representable neighbours is slow; this path is only
  // used when writing test checkpoints, so clarity wins: encode by exponent and rounding.
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  float magnitude = std::fabs(value);
  if (std::isnan(value)) return 0x7e00;
  if (magnitude >= 65520.0f) return sign | 0x7c00;
  if (magnitude < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24
    return sign | uint16_t(std::nearbyint(magnitude * std::ldexp(1.0f, 24)));
  }
  int exponent;
  std::frexp(magnitude, &exponent);                                     // magnitude = m * 2^exponent, m in [0.5, 1)
  float scaled = std::nearbyint(std::ldexp(magnitude, 11 - exponent));  // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2;
    exponent += 1;
  }
  const uint16_t biased = uint16_t(exponent - 1 + 15);
  if (biased >= 31) return sign | 0x7c00;
  return sign | uint16_t(biased << 10) | (uint16_t(scaled) & 0x3ff);
}

float fp8_e4m3_to_f32(uint8_t bits) {
  const uint32_t sign = bits >> 7, exponent = (bits >> 3) & 0xf, mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7)
    magnitude = NAN;
  else if (exponent == 0)
    magnitude = std::ldexp(float(mantissa), -9);  // subnormal: m/8 * 2^-6
  else
    magnitude = std::ldexp(float(8 + mantissa), int(exponent) - 10);
  return sign ? -magnitude : magnitude;
}

uint8_t f32_to_fp8_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  const float magnitude = std::fmin(std::fabs(value), 448.0f);
  // Below 2^-6 the codes are the multiples of 2^-9 (code 8 is 2^-6 itself, the first normal).
  if (magnitude < 0x1p-6f) return sign | uint8_t(std::nearbyint(magnitude * 512.0f));
  // A normal value: fp32's exponent and top three mantissa bits, rounded to nearest even in
  // place (a carry moves into the exponent), then E4M3's bias of 7 for fp32's 127.
  uint32_t bits;
  std::memcpy(&bits, &magnitude, 4);
  bits += 0x7ffff + ((bits >> 20) & 1);
  return sign | uint8_t((bits >> 20) - (120u << 3));
}

const float* fp8_e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> values{};
    for (int code = 0; code < 256; ++code) values[code] = fp8_e4m3_to_f32(uint8_t(code));
    return values;
  }();
  return table.data();
}

}  // namespace mlaserve
