// The 4-bit formats' integer GEMM on AMX-INT8 (amx_gemm.h, gemm_4bit_q8_rows_amx).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/amx_gemm.h"
#include "kernels/amx_tiles.h"
#include "kernels/quant_dot.h"

namespace MLASERVE_KERNELS_NS {

#ifdef MLA_AMX
namespace {
using amx::kTileRows, amx::load_tile_config, amx::NextTilesPrefetch, amx::spread_prefetch, amx::TileConfig;

// A 4-bit weight's codes of rows [next_row, next_row + 16) before row_end, over `tile_steps`.
NextTilesPrefetch next_4bit_rows_prefetch(const LinearWeight& weight, int64_t next_row, int64_t row_end,
                                          int64_t tile_steps) {
  if (next_row >= row_end) return {};
  const char* first = static_cast<const char*>(weight.data) +
                      (weight.row_offset + next_row) * (weight.stored_cols / 2) + weight.col_offset / 2;
  const int64_t rows = std::min(kTileRows, row_end - next_row);
  return spread_prefetch(first, weight.cols / 2, weight.stored_cols / 2, rows, tile_steps);
}

// The 4-bit GEMM's tiles: C[j] (16 tokens x 16 rows, int32) in 0-1, A[j] (16 tokens x 32
// int8) in 2-3, B[j] (8 rows of 16 weight rows x 4 int8) in 4-5, for two blocks at once.
void configure_int8_tiles() {
  TileConfig config;
  for (int j = 0; j < 2; ++j) {
    config.rows[j] = kTileRows, config.bytes_per_row[j] = 64;
    config.rows[2 + j] = kTileRows, config.bytes_per_row[2 + j] = kQ8Block;
    config.rows[4 + j] = kQ8Block / 4, config.bytes_per_row[4 + j] = 64;
  }
  load_tile_config(config);
}

constexpr int64_t kInt8TileBytes = kTileRows * kQ8Block;  // an A or B tile: 512 bytes
constexpr int64_t kInt8GroupTokens = 512;

// A group's quantized activations as A tiles [token block][block][16][32], each block's
// columns evens first (the order a 4-bit code byte's nibbles come in), and their scales
// [token][block]; zero for tokens past `tokens`. Q8Buffer keeps a pair of blocks as the evens
// of both, then the odds of both (q8_index).
void gather_q8_tiles(const Q8Buffer& x, int64_t t0, int64_t tokens, int64_t token_blocks, int64_t blocks, int8_t* tiles,
                     float* scales) {
  std::memset(tiles, 0, size_t(token_blocks * blocks * kInt8TileBytes));
  std::fill(scales, scales + token_blocks * kTileRows * blocks, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    const Q8Activations token = x.token(t0 + t);
    int8_t* row = tiles + (t / kTileRows) * blocks * kInt8TileBytes + (t % kTileRows) * kQ8Block;
    for (int64_t b = 0; b < blocks; ++b) {
      const int8_t* evens = token.values + q8_index(blocks, b, 0);
      const int8_t* odds = token.values + q8_index(blocks, b, 1);
      std::memcpy(row + b * kInt8TileBytes, evens, kQ8Block / 2);
      std::memcpy(row + b * kInt8TileBytes + kQ8Block / 2, odds, kQ8Block / 2);
      scales[t * blocks + b] = token.scales[b];
    }
  }
}

// Rows [first_row, first_row + n_rows) of a 4-bit weight as B tiles, one a block: word (p, n)
// holds row n's signed codes for columns 4p..4p+3 of the block in the A tiles' order (evens,
// then odds); scales [block][16] in fp32 (INT4: the group's; MXFP4: the halved E8M0, as the
// codes are doubled), 0 for rows past n_rows (whose codes repeat the last row's).
void build_4bit_tiles(const LinearWeight& weight, int64_t first_row, int n_rows, int64_t blocks, int8_t* tiles,
                      float* scales) {
  const bool mxfp4 = weight.format == WeightFormat::Mxfp4;
  const int64_t group = mxfp4 ? kQ8Block : weight.group_size;
  alignas(16) int8_t signed_code[16];
  for (int code = 0; code < 16; ++code)
    signed_code[code] = int8_t(mxfp4 ? kE2M1DoubledPlus12[code] - kMxfp4Offset : code - kInt4Offset);
  const __m128i lookup = _mm_load_si128(reinterpret_cast<const __m128i*>(signed_code));
  const auto& half_scales = e8m0_half_scales();
  for (int n = 0; n < kTileRows; ++n) {
    const int64_t stored_row = weight.row_offset + first_row + std::min(n, n_rows - 1);
    const uint8_t* bytes =
        static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
    const int64_t scale_row = stored_row * (weight.stored_cols / group) + weight.col_offset / group;
    for (int64_t b = 0; b < blocks; ++b) {
      const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + b * kQ8Block / 2));
      alignas(16) int8_t codes[kQ8Block];
      _mm_store_si128(reinterpret_cast<__m128i*>(codes),
                      _mm_shuffle_epi8(lookup, _mm_and_si128(packed, _mm_set1_epi8(0x0f))));
      _mm_store_si128(reinterpret_cast<__m128i*>(codes + 16),
                      _mm_shuffle_epi8(lookup, _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f))));
      int8_t* tile = tiles + b * kInt8TileBytes;
      for (int p = 0; p < kQ8Block / 4; ++p) std::memcpy(tile + (p * kTileRows + n) * 4, codes + 4 * p, 4);
      const int64_t at = scale_row + b * kQ8Block / group;
      const float scale = mxfp4 ? half_scales[weight.e8m0_scale[at]] : bf16_to_f32(weight.group_scale[at]);
      scales[b * kTileRows + n] = n < n_rows ? scale : 0.0f;
    }
  }
}

// acc[t] (16 rows) += float(c[t]) * x_scales[t] * w_scales for the 16 tokens of an int32 C tile.
void scale_and_add(const int32_t* c, const float* x_scales, int64_t x_scale_stride, const float* w_scales,
                   __m512 acc[]) {
  const __m512 w = _mm512_loadu_ps(w_scales);
#pragma GCC unroll 16
  for (int t = 0; t < kTileRows; ++t) {
    const __m512 sums = _mm512_maskz_cvtepi32_ps(0xffff, _mm512_loadu_si512(c + t * kTileRows));
    acc[t] = _mm512_fmadd_ps(sums, _mm512_mul_ps(_mm512_set1_ps(x_scales[t * x_scale_stride]), w), acc[t]);
  }
}

// y rows of one token block and one panel: for each block, C = A * B (exact int32), then scaled
// into fp32 accumulators in block order; two blocks' products in flight at a time.
void token_block_4bit(const int8_t* a, const int8_t* b, const float* x_scales, const float* w_scales, int64_t blocks,
                      NextTilesPrefetch& prefetch, __m512 acc[]) {
  alignas(64) int32_t c[2][kTileRows * kTileRows];
  for (int t = 0; t < kTileRows; ++t) acc[t] = _mm512_setzero_ps();
  int64_t block = 0;
  for (; block + 2 <= blocks; block += 2) {
    prefetch.step();
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(2, a + block * kInt8TileBytes, kQ8Block);
    _tile_loadd(4, b + block * kInt8TileBytes, 64);
    _tile_loadd(3, a + (block + 1) * kInt8TileBytes, kQ8Block);
    _tile_loadd(5, b + (block + 1) * kInt8TileBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_dpbssd(1, 3, 5);
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    scale_and_add(c[0], x_scales + block, blocks, w_scales + block * kTileRows, acc);
    scale_and_add(c[1], x_scales + block + 1, blocks, w_scales + (block + 1) * kTileRows, acc);
  }
  if (block < blocks) {
    _tile_zero(0);
    _tile_loadd(2, a + block * kInt8TileBytes, kQ8Block);
    _tile_loadd(4, b + block * kInt8TileBytes, 64);
    _tile_dpbssd(0, 2, 4);
    _tile_stored(0, c[0], 64);
    scale_and_add(c[0], x_scales + block, blocks, w_scales + block * kTileRows, acc);
  }
}

struct Int8Buffers {
  std::vector<int8_t> a, b;
  std::vector<float> x_scales, w_scales;
};

}  // namespace

void gemm_4bit_q8_rows_amx(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                           int64_t n_tokens, float* y, int64_t y_stride) {
  const bool mxfp4 = weight.format == WeightFormat::Mxfp4;
  MLA_CHECK(
      amx_available() && (mxfp4 || (weight.format == WeightFormat::Int4Group && weight.group_size % kQ8Block == 0)),
      "AMX 4-bit GEMM: needs AMX and MXFP4 or INT4 groups of whole 32-column blocks");
  thread_local Int8Buffers buffers;
  const int64_t blocks = weight.cols / kQ8Block;
  buffers.b.resize(size_t(blocks * kInt8TileBytes));
  buffers.w_scales.resize(size_t(blocks * kTileRows));
  configure_int8_tiles();
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kInt8GroupTokens) {
    const int64_t tokens = std::min(kInt8GroupTokens, n_tokens - t0),
                  token_blocks = (tokens + kTileRows - 1) / kTileRows;
    buffers.a.resize(size_t(token_blocks * blocks * kInt8TileBytes));
    buffers.x_scales.resize(size_t(token_blocks * kTileRows * blocks));
    gather_q8_tiles(x, t0, tokens, token_blocks, blocks, buffers.a.data(), buffers.x_scales.data());
    for (int64_t first_row = row_begin; first_row < row_end; first_row += kTileRows) {
      const int n_rows = int(std::min<int64_t>(kTileRows, row_end - first_row));
      build_4bit_tiles(weight, first_row, n_rows, blocks, buffers.b.data(), buffers.w_scales.data());
      NextTilesPrefetch prefetch =
          next_4bit_rows_prefetch(weight, first_row + kTileRows, row_end, token_blocks * (blocks / 2));
      for (int64_t block = 0; block < token_blocks; ++block) {
        __m512 acc[kTileRows];
        token_block_4bit(buffers.a.data() + block * blocks * kInt8TileBytes, buffers.b.data(),
                         buffers.x_scales.data() + block * kTileRows * blocks, buffers.w_scales.data(), blocks,
                         prefetch, acc);
        for (int64_t i = 0; i < kTileRows && t0 + block * kTileRows + i < n_tokens; ++i)
          _mm512_mask_storeu_ps(y + (t0 + block * kTileRows + i) * y_stride + (first_row - row_begin),
                                __mmask16((1u << n_rows) - 1), acc[i]);
      }
    }
  }
  _tile_release();
}

#else

void gemm_4bit_q8_rows_amx(const LinearWeight&, int64_t, int64_t, const Q8Buffer&, int64_t, float*, int64_t) {
  fail("AMX GEMM: this build has no AMX (the avx512 kernel build has it)");
}

#endif

}  // namespace MLASERVE_KERNELS_NS
