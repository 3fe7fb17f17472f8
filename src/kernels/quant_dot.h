// Dot products that read 4-bit weights directly (dequantisation fused into the FMA loop; no
// fp32 row is written): the decode path of INT4 and MXFP4 weights, which is memory-bound and
// so wants the 4-bit bytes to be the only thing streamed. Both formats keep column c in
// nibble c % 8 of a little-endian 32-bit word (INT4: one int32; MXFP4: four bytes).
#pragma once
#include <cstdint>

namespace mlaserve {

// sum_c (nibble_c - 8) * bf16(scales[c / group]) * x[c]; cols a multiple of group (itself of 8).
float dot_int4_row(const uint32_t* words, const uint16_t* scales, int64_t group, const float* x, int64_t cols);

// sum_c E2M1(nibble_c) * 2^(e8m0[c / 32] - 127) * x[c]; cols a multiple of 32.
float dot_mxfp4_row(const uint8_t* bytes, const uint8_t* e8m0, const float* x, int64_t cols);

}  // namespace mlaserve
