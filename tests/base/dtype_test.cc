#include "base/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "base/error.h"

namespace mlaserve {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-12f)), 1.0078125f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, Fp8E4M3KnownValues) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);     // exponent 7 = bias
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);   // largest finite
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0x1p-9f);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
  EXPECT_EQ(f32_to_fp8_e4m3(1000.0f), 0x7e);  // saturates
}

TEST(DType, Fp8EncodeIsNearestForEveryCode) {
  for (int code = 0; code < 0x7f; ++code) {
    const float value = fp8_e4m3_to_f32(uint8_t(code));
    EXPECT_EQ(f32_to_fp8_e4m3(value), code);
    EXPECT_EQ(f32_to_fp8_e4m3(-value), code == 0 ? 0x80 : (0x80 | code));
    if (code + 1 < 0x7f) {  // just below the midpoint rounds down
      const float next = fp8_e4m3_to_f32(uint8_t(code + 1));
      EXPECT_EQ(f32_to_fp8_e4m3(value + (next - value) * 0.49f), code);
    }
  }
}

// Random magnitudes over E4M3's whole range (and past it) against a search for the nearest code.
TEST(DType, Fp8EncodeMatchesNearestSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  for (int i = 0; i < 200000; ++i) {
    const float value = std::exp2(exponent(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    const float magnitude = std::fmin(std::fabs(value), 448.0f);
    int best = 0;
    for (int code = 1; code < 0x7f; ++code) {
      const float error = std::fabs(fp8_e4m3_to_f32(uint8_t(code)) - magnitude);
      const float best_error = std::fabs(fp8_e4m3_to_f32(uint8_t(best)) - magnitude);
      if (error < best_error || (error == best_error && code % 2 == 0)) best = code;
    }
    ASSERT_EQ(f32_to_fp8_e4m3(value), (value < 0 ? 0x80 : 0) | best) << value;
  }
}

TEST(DType, F16RoundTrip) {
  for (float value : {0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-24f, 3.14159f}) {
    const float round_trip = f16_to_f32(f32_to_f16(value));
    EXPECT_NEAR(round_trip, value, std::fabs(value) * 1e-3 + 1e-8) << value;
  }
}

// Every E8M0 exponent against std::ldexp, the definition 2^(e - 127) (e = 0 a denormal).
TEST(DType, E8M0ScalesArePowersOfTwo) {
  for (int e = 0; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(uint8_t(e)), std::ldexp(1.0f, e - 127)) << e;
  EXPECT_TRUE(std::isinf(e8m0_to_f32(255)));
}

TEST(DType, UnknownNameIsAnError) {
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_THROW(dtype_from_name("Q4_K"), Error);
}

}  // namespace mlaserve
