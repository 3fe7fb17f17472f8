// Load-time quantization of BF16 weights (`--requantize q4`): each row's groups of 32 columns
// to INT4 as compressed-tensors pack-quantized stores them (make-model --dtype int4 writes
// the same), for the 4-bit kernels: a BF16 checkpoint's projections read in ~0.56 bytes a
// weight instead of 2, as llama.cpp's Q4_0 files do.
#pragma once
#include <cstdint>

#include "io/linear_weight.h"

namespace mlaserve {

constexpr int64_t kRequantizeGroup = 32;

// One row of `cols` values (a multiple of `group`) to INT4: per group the symmetric scale
// max|w| / 7 rounded to bf16 (1 for an all-zero group), and q = clamp(round(w / scale), -8, 7)
// with the stored scale, kept as q + 8, eight to a word, column c in bits 4 * (c % 8).
// Either output may be null.
void quantize_int4_row(const float* values, int64_t cols, int64_t group, uint32_t* words, uint16_t* scales);

// A BF16 weight (or view) quantized by rows into INT4 groups of kRequantizeGroup, its
// activations rounded to int8 (ActivationQuant::Int8): in 16-row panels (repack_4bit_panels)
// when `into_panels`, else row-major, in a buffer appended to `storage`; the stored rows'
// pages of `source` released. Other formats, and widths not of whole groups, are returned
// unchanged.
LinearWeight requantize_int4(const LinearWeight& weight, WeightCopies& storage, bool into_panels,
                             const Checkpoint* source = nullptr);

}  // namespace mlaserve
