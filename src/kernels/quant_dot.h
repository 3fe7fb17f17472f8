// Dot products that read quantized weights directly (dequantisation fused; no fp32 row is
// written): decode is memory-bound, so the stored bytes should be the only thing streamed.
//
// 4-bit weights (INT4 group, MXFP4) meet activations quantized on the fly to int8 per block
// of 32 columns (llama.cpp's Q8_0 idea): one scale amax/127 per block, values round-half-even
// of x * 127/amax. Integer products (vpmaddubsw) then replace the nibble -> float expansion,
// which ran at a third of the rate memory could feed it. The error this adds is that of
// rounding x to 8 bits: about 0.5% of a dot product's size (docs/correctness.md). Single tokens
// and batches of up to 15 use the same quantized dot and get the same bits from it; larger
// batches meet the same int8 values in an integer GEMM (gemm_4bit.h).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/isa_namespace.h"

namespace MLASERVE_KERNELS_NS {

constexpr int64_t kQ8Block = 32;

// The 4-bit codes as unsigned integers for vpmaddubsw. INT4 nibbles are already unsigned
// (value + 8). MXFP4: twice the E2M1 value of each code (bit 3 the sign) plus 12, an integer in
// [0, 24]; the 2 goes into the block scale (e8m0_half_scales) and the offset into the
// block-sum correction.
constexpr int kInt4Offset = 8, kMxfp4Offset = 12;
constexpr uint8_t kE2M1DoubledPlus12[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

// 2^(e - 127) / 2 for every E8M0 exponent e: the MXFP4 block scale with the halving above.
const std::array<float, 256>& e8m0_half_scales();

// One token's activations as quantize_q8 leaves them. Per block of 32: the scale and the
// scale times the sum of the block's int8 values (so offset-coded weights need no
// per-weight subtraction); the same per pair of blocks spread over 8 lanes (block 2p in lanes
// 0-3, 2p + 1 in 4-7, scaled sums divided by 4) for the vector loop.
struct Q8Activations {
  const int8_t* values;       // [cols]
  const float* scales;        // [cols / 32]
  const float* scaled_sums;   // [cols / 32]
  const float* scales8;       // [cols / 64 * 8]
  const float* scaled_sums8;  // [cols / 64 * 8]
};

// Several tokens' activations quantized to int8 per block of 32 (round half to even of
// x * 127 / amax, scale amax / 127). The values are stored in the order the 4-bit formats keep
// their nibbles (low nibble of byte b: column 2b, high: 2b + 1), a pair of blocks at a time:
// columns 0, 2, .., 62 (evens of both blocks), then 1, 3, .., 63; a last unpaired block: its
// evens, then its odds. Reused across calls, so the decode path allocates nothing.
class Q8Buffer {
 public:
  // Quantizes rows x + t * x_stride, t < n_tokens, of cols (a multiple of 32) values.
  void quantize(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols);
  Q8Activations token(int64_t t) const;

 private:
  int64_t cols_ = 0;
  std::vector<int8_t> values_;
  std::vector<float> scales_, scaled_sums_, scales8_, scaled_sums8_;
};

// Where Q8Buffer stores column c (< 32) of block `block` of a token's `blocks` blocks (inline:
// the panel dots ask it twice a block).
inline int64_t q8_index(int64_t blocks, int64_t block, int c) {
  const int64_t pair_start = block / 2 * 2 * kQ8Block;
  if (block / 2 * 2 + 1 < blocks) return pair_start + (c % 2) * 32 + (block % 2) * 16 + c / 2;
  return pair_start + (c % 2) * 16 + c / 2;  // the last, unpaired block
}

// out[r * n_tokens + t] = sum_c (nibble_c - 8) * bf16(w_scales[r][c / group]) * x[t]_c for
// n_rows = 1 and n_tokens 1..kQ8MaxTokens (the weights decoded once for all of them), or
// n_rows = 4 and 1..kQ8QuadTokens tokens (4 rows streamed at once); each (row, token) result
// the same bits in any block. group a multiple of 32, cols of group. Nibble c % 8 of word c / 8
// is column c.
void dot_int4_q8(const uint32_t* const words[], const uint16_t* const w_scales[], int n_rows, int64_t group,
                 const Q8Activations* x, int64_t n_tokens, int64_t cols, float* out);

// out[r * n_tokens + t] = sum_c E2M1(nibble_c) * 2^(e8m0[r][c / 32] - 127) * x[t]_c; rows and
// tokens as dot_int4_q8; cols a multiple of 32.
void dot_mxfp4_q8(const uint8_t* const bytes[], const uint8_t* const e8m0[], int n_rows, const Q8Activations* x,
                  int64_t n_tokens, int64_t cols, float* out);

constexpr int64_t kQ8MaxTokens = 4;
constexpr int64_t kQ8QuadTokens = 3;

}  // namespace MLASERVE_KERNELS_NS
