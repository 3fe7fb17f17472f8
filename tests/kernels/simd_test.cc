// The vectorised element-wise maths of kernels/simd.h against std:: functions in float64: the
// exponential behind every softmax and the SwiGLU of every MLP, at lengths with SIMD tails.
#include "kernels/simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/dtype.h"

namespace mlaserve {
namespace {

// The vectorised exponential behind every softmax, against std::exp: shifted scores from 0
// down to -100 (below the clamp), odd lengths for the scalar tail.
// Every E4M3 code but the NaNs (subnormals included), at scales from 2^-100 to 2^100, in runs
// that leave a scalar tail: exactly the code's value times the scale.
TEST(WidenFp8, EveryCodeTimesItsScaleExactly) {
  std::vector<uint8_t> codes;
  for (int code = 0; code < 256; ++code)
    if ((code & 0x7f) != 0x7f) codes.push_back(uint8_t(code));
  std::vector<float> out(codes.size());
  for (int exponent : {-100, -7, 0, 3, 100}) {
    const float scale = std::ldexp(1.0f, exponent);
    simd::widen_fp8_e4m3(codes.data(), scale, out.data(), int64_t(codes.size()));
    for (size_t i = 0; i < codes.size(); ++i)
      ASSERT_EQ(out[i], fp8_e4m3_to_f32(codes[i]) * scale) << "code " << int(codes[i]) << ", scale 2^" << exponent;
  }
}

TEST(ExpShifted, MatchesStdExp) {
  for (int64_t n : {1, 7, 8, 61}) {
    std::vector<float> x(static_cast<size_t>(n)), want(x.size());
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = 3.0f - 103.0f * float(i * 37 % n) / float(n);
    double want_sum = 0;
    for (size_t i = 0; i < x.size(); ++i) want_sum += (want[i] = std::exp(x[i] - 3.0f));
    const float sum = simd::exp_shifted(x.data(), n, 3.0f);
    for (size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(x[i], want[i], 3e-7 * want[i] + 1e-37) << "n " << n << " element " << i;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
  }
}

// silu(gate) * up against float64 over gates from -100 to 100 (both exponent clamps of
// exp8) and random-signed ups; odd lengths run the scalar tail.
TEST(SiluTimes, MatchesFloat64) {
  for (int64_t n : {1, 7, 8, 61}) {
    std::vector<float> gate(static_cast<size_t>(n)), up(gate.size());
    for (int64_t i = 0; i < n; ++i) {
      gate[size_t(i)] = -100.0f + 200.0f * float(i * 37 % n) / float(n) + 0.37f;
      up[size_t(i)] = (i % 3 == 0 ? -1.0f : 1.0f) * (0.5f + float(i * 11 % 7));
    }
    std::vector<double> want(gate.size());
    for (size_t i = 0; i < gate.size(); ++i)
      want[i] = double(gate[i]) / (1.0 + std::exp(-double(gate[i]))) * double(up[i]);
    simd::silu_times(gate.data(), up.data(), n);
    for (size_t i = 0; i < gate.size(); ++i)  // ~2 ulp from exp8, one rounding each for the divide and multiply
      EXPECT_NEAR(gate[i], want[i], 1e-6 * std::abs(want[i]) + 1e-30) << "n " << n << " element " << i;
  }
}

}  // namespace
}  // namespace mlaserve
