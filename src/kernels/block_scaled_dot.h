// Rows of one byte a weight with float scales per block of columns — FP8 E4M3 (DeepSeek-V3,
// 128 x 128 blocks) and INT8 (compressed-tensors int-quantized, a scale per row or per group)
// — against one token's activations: the decode GEMV. 16 codes become two fp32 vectors in a
// few integer ops. FP8: shifting a code's exponent and mantissa to fp32's places gives its
// value times 2^-120 (E4M3's exponent bias is 7, fp32's 127; subnormals land on fp32
// subnormals exactly), a sign-extending load, two shifts, two masks, no vcvtph2ps. INT8: the
// sign-extended codes converted to fp32 (exact). The activations are scaled by a power of two
// chosen from their largest magnitude so that FP8's products stay in fp32's normal range; the
// powers come off the sum at the end. Both scalings are exact.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/isa_namespace.h"

namespace MLASERVE_KERNELS_NS {

enum class ByteCode { Fp8E4M3, Int8 };

// out[c] = E4M3(codes[c]) * scale, or int8(codes[c]) * scale: the row dequantisation of
// batched FP8 and INT8 layers.
void fp8_to_f32(const uint8_t* codes, float scale, float* out, int64_t n);
void int8_to_f32(const uint8_t* codes, float scale, float* out, int64_t n);

// One token's activations as dot_block_scaled_rows reads them: x * 2^exponent (exponent chosen
// from max |x|), each 16 columns as its 8 even columns then its 8 odd (the order the codes
// come out in), zero-padded to whole 16s. Reused across calls, so the decode path allocates
// nothing once it has grown.
class BlockScaledActivations {
 public:
  void prepare(const float* x, int64_t n, ByteCode code);
  const float* values() const { return values_.data(); }
  ByteCode code() const { return code_; }
  // 2^(-exponent) times the codes' own factor (FP8: 2^120), as two factors (it may exceed a
  // float): takes a row's sum of the codes times these values back to the true dot product.
  const std::array<float, 2>& unscale() const { return unscale_; }

 private:
  std::vector<float> values_;
  ByteCode code_ = ByteCode::Fp8E4M3;
  std::array<float, 2> unscale_ = {1.0f, 1.0f};
};

// Tokens dot_block_scaled_rows takes at once: 15 with AVX-512 (in groups of up to 4, each
// group's 4 rows x 4 tokens of chains in registers and the codes widened once for the group),
// else 1 (AVX2's 16 registers hold one token's two chains a row).
int block_scaled_max_tokens();

// out[r * n_tokens + t] = sum_{c < n} value(codes[r][c]) * scales[r][(c + phase) / block_cols]
// * x_t[c] for n_rows 1 or 4 (4 rows read together) and n_tokens tokens (1 to
// block_scaled_max_tokens(), each prepared alone, for the kind of codes given): each row's and
// token's result is the bits it gets alone (the same chains, in the same order; the codes
// widened once for all the tokens). The columns are a weight view's whose first column sits
// `phase` columns into its first scale block. FP8 codes 0x7f and 0xff (NaN) are not expected
// in weights; the vector loop reads them as +-480.
void dot_block_scaled_rows(const uint8_t* const codes[], const float* const scales[], int n_rows, int64_t phase,
                           int64_t block_cols, const BlockScaledActivations* const tokens[], int n_tokens, int64_t n,
                           float* out);

}  // namespace MLASERVE_KERNELS_NS
