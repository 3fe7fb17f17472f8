#include "linear_test_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/dtype.h"

namespace mlaserve::testing {

TestWeight make_weight(WeightFormat format, int64_t rows, int64_t cols, uint64_t seed, int64_t group) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  TestWeight t;
  t.values.resize(size_t(rows * cols));
  t.weight.format = format;
  t.weight.rows = rows;
  t.weight.cols = cols;
  t.weight.stored_cols = cols;
  if (format == WeightFormat::F32 || format == WeightFormat::BF16 || format == WeightFormat::F16) {
    const size_t size = format == WeightFormat::F32 ? 4 : 2;
    t.bytes.resize(t.values.size() * size);
    for (size_t i = 0; i < t.values.size(); ++i) {
      const float value = uniform(rng);
      if (format == WeightFormat::F32) {
        std::memcpy(&t.bytes[4 * i], &value, 4);
        t.values[i] = value;
      } else {
        const uint16_t half = format == WeightFormat::BF16 ? f32_to_bf16(value) : f32_to_f16(value);
        std::memcpy(&t.bytes[2 * i], &half, 2);
        t.values[i] = format == WeightFormat::BF16 ? bf16_to_f32(half) : f16_to_f32(half);
      }
    }
  } else if (format == WeightFormat::Fp8Block) {
    const int64_t block_rows = (rows + 127) / 128, block_cols = (cols + 127) / 128;
    t.block_scale.resize(size_t(block_rows * block_cols));
    for (auto& scale : t.block_scale) scale = 0.01f + 0.02f * float(byte(rng));
    t.bytes.resize(t.values.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t code = uint8_t(byte(rng));
        if ((code & 0x7f) == 0x7f) code ^= 1;  // no NaN codes
        t.bytes[r * cols + c] = code;
        t.values[r * cols + c] = fp8_e4m3_to_f32(code) * t.block_scale[(r / 128) * block_cols + c / 128];
      }
    t.weight.block_scale = t.block_scale.data();
  } else if (format == WeightFormat::Int8Block) {
    // Scales per 1 x `group` block where group divides cols (strategy group), else one per row
    // (strategy channel); codes over the whole int8 range.
    const int64_t block = cols % group == 0 ? group : cols;
    t.block_scale.resize(size_t(rows * (cols / block)));
    for (auto& scale : t.block_scale) scale = 0.001f + 0.0001f * float(byte(rng));
    t.bytes.resize(t.values.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const auto code = int8_t(byte(rng) - 128);
        std::memcpy(&t.bytes[r * cols + c], &code, 1);
        t.values[r * cols + c] = float(code) * t.block_scale[r * (cols / block) + c / block];
      }
    t.weight.block_scale = t.block_scale.data();
    t.weight.block_rows = 1;
    t.weight.block_cols = block;
  } else if (format == WeightFormat::Mxfp4) {
    // E2M1 from the OCP MX definition: sign bit 3, exponent bits 2..1 (bias 1), mantissa bit 0;
    // exponent 0 is subnormal (0 or 0.5). Scales E8M0: 2^(s - 127).
    auto e2m1 = [](int code) {
      const int exponent = (code >> 1) & 3, mantissa = code & 1;
      const float magnitude =
          exponent == 0 ? 0.5f * float(mantissa) : std::ldexp(1.0f + 0.5f * float(mantissa), exponent - 1);
      return code & 8 ? -magnitude : magnitude;
    };
    t.scales_u8.resize(size_t(rows * cols / 32));
    for (auto& scale : t.scales_u8) scale = uint8_t(120 + byte(rng) % 12);
    t.bytes.resize(size_t(rows * cols / 2));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int code = byte(rng) % 16;
        t.bytes[(r * cols + c) / 2] |= uint8_t(code << (4 * (c % 2)));  // low nibble: even column
        t.values[r * cols + c] = e2m1(code) * std::ldexp(1.0f, int(t.scales_u8[(r * cols + c) / 32]) - 127);
      }
    t.weight.e8m0_scale = t.scales_u8.data();
    t.weight.group_size = 32;
  } else {  // Int4Group
    t.group_scale.resize(size_t(rows * cols / group));
    for (auto& scale : t.group_scale) scale = f32_to_bf16(0.001f + 0.01f * float(byte(rng)));
    t.bytes.resize(size_t(rows * cols / 2));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int q = byte(rng) % 16 - 8;
        t.bytes[(r * cols + c) / 2] |= uint8_t((q + 8) << (4 * (c % 2)));  // little-endian words
        t.values[r * cols + c] = float(q) * bf16_to_f32(t.group_scale[(r * cols + c) / group]);
      }
    t.weight.group_scale = t.group_scale.data();
    t.weight.group_size = group;
  }
  t.weight.data = t.bytes.data();
  return t;
}

std::vector<float> reference(const TestWeight& t, const std::vector<float>& x, int64_t n_tokens) {
  const int64_t rows = t.weight.rows, cols = t.weight.cols;
  std::vector<float> y(size_t(n_tokens * rows));
  for (int64_t n = 0; n < n_tokens; ++n)
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t c = 0; c < cols; ++c) sum += double(t.values[r * cols + c]) * x[n * cols + c];
      y[n * rows + r] = float(sum);
    }
  return y;
}

std::vector<float> kernel_input(const LinearWeight& weight, const std::vector<float>& x, int64_t cols) {
  const bool q8 =
      weight.format == WeightFormat::Mxfp4 || (weight.format == WeightFormat::Int4Group && weight.group_size % 32 == 0);
  if (!q8) return x;
  std::vector<float> out(x.size());
  for (size_t begin = 0; begin < x.size(); begin += 32) {
    float amax = 0.0f;
    for (size_t i = begin; i < begin + 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (size_t i = begin; i < begin + 32; ++i) out[i] = std::nearbyint(x[i] * inverse) * (amax / 127.0f);
  }
  EXPECT_EQ(cols % 32, 0);
  return out;
}

}  // namespace mlaserve::testing
