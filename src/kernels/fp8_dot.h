// FP8 E4M3 (block-scaled, DeepSeek-V3's format) rows against one token's activations: the
// decode GEMV. 16 codes become two fp32 vectors in five integer ops (a sign-extending load,
// two shifts, two masks; no vcvtph2ps): shifting a code's exponent and mantissa to fp32's
// places gives its value times 2^-120 (E4M3's exponent bias is 7, fp32's 127; subnormals land
// on fp32 subnormals exactly). The activations are scaled by a power of two chosen from their
// largest magnitude so that the products stay in fp32's normal range; the two powers come off
// the sum at the end. Both scalings are exact.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace mlaserve {

// out[c] = E4M3(codes[c]) * scale (the row dequantisation of batched FP8 layers).
void fp8_to_f32(const uint8_t* codes, float scale, float* out, int64_t n);

// One token's activations as dot_fp8_rows reads them: x * 2^exponent (exponent chosen from
// max |x|), each 16 columns as its 8 even columns then its 8 odd (the order the codes come out
// in), zero-padded to whole 16s. Reused across calls, so the decode path allocates nothing
// once it has grown.
class Fp8Activations {
 public:
  void prepare(const float* x, int64_t n);
  const float* values() const { return values_.data(); }
  // 2^(120 - exponent), as two factors (it may exceed a float): takes a row's sum of the
  // scaled weights times these values back to the true dot product.
  const std::array<float, 2>& unscale() const { return unscale_; }

 private:
  std::vector<float> values_;
  std::array<float, 2> unscale_ = {1.0f, 1.0f};
};

// out[r] = sum_{c < n} E4M3(codes[r][c]) * scales[r][(c + phase) / block_cols] * x[c] for n_rows
// 1 or 4 (4 rows read together, each row's result the bits of it alone): the columns of a
// weight view whose first column sits `phase` columns into its first scale block. Codes 0x7f
// and 0xff (NaN) are not expected in weights; the vector loop reads them as +-480.
void dot_fp8_rows(const uint8_t* const codes[], const float* const scales[], int n_rows, int64_t phase,
                  int64_t block_cols, const Fp8Activations& x, int64_t n, float* out);

}  // namespace mlaserve
