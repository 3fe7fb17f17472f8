#include "kernels/gemm_4bit.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/four_bit_panels.h"
#include "kernels/four_bit_steps.h"

namespace MLASERVE_KERNELS_NS {
namespace {

// Loop nest: token tiles of kTileTokens, then columns in chunks of kChunkBlocks blocks, then
// panels of kPanelRows rows whose codes are regrouped once per chunk for all of the tile's
// tokens, then blocks of up to kMaxBlockTokens tokens. One int32 lane a row; a step multiplies
// each row's codes of 4 columns by one token's 4 activations broadcast to every lane.
//
// With AVX-512 VNNI: 16 rows a register, each step one vpdpbusd a token (the 4 products summed
// into the row's 32-bit lane), so a block costs a token 8 vpdpbusd, a conversion and two FMAs
// for 16 rows: 512 multiply-adds in 11 operations.
//
// With AVX2: 8 rows a register, vpmaddubsw summing the 4 products in pairs (16 bits). INT4
// codes are at most 15, so a 32-column block's 8 steps add up in 16 bits (each lane at most
// 8 * 2 * 15 * 127 = 30480); MXFP4's reach 24, so its sums widen to 32 bits every 4 steps
// (24384), which needs more registers a token. A block costs a token 8 vpmaddubsw + 8 vpaddw
// and one widening, conversion and two FMAs for 8 rows: 256 multiply-adds in ~20 operations,
// where fp32 FMAs take 32.
constexpr int kPanelRows = kFourBitStepRows;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr int kMaxBlockTokens = 8;  // 8 int32 sums and 8 accumulators in registers
#else
constexpr int kMaxBlockTokens = 6;  // INT4: 6 16-bit sums and 6 accumulators in registers
#endif
constexpr int64_t kChunkBlocks = 32;  // 1024 columns: 16 rows' codes 16 KB and scales 2 KB, L1
constexpr int64_t kTileTokens = 128;  // a chunk of the tile's int8 activations: 128 KB, L2
constexpr int kSteps = 8;             // 4-column steps of a 32-column block

// Step s of block b holds, in int32 lane i, row i's codes of columns 8 (s / 2) + s % 2 +
// {0, 2, 4, 6} (the low nibbles of the row's stored word s / 2 at even s, the high at odd),
// one unsigned byte each (quant_dot.h). The rows' block scales in fp32 (0 for rows past the
// weight's end).
struct alignas(64) Panel {
  uint8_t codes[kChunkBlocks][kSteps][4 * kPanelRows];
  float scales[kChunkBlocks][kPanelRows];
};

// What a tile's tokens read in a chunk: each token's int8 values, and per block of the chunk
// its scale and offset * scale * sum(q) (the offset's share); where a block's evens and odds
// begin in Q8Buffer's order (the same for every token).
struct ChunkTokens {
  const int8_t* values[kTileTokens];
  const float* scales[kTileTokens];
  const float* offsets[kTileTokens];
  int64_t starts[kChunkBlocks][2];
};

#if defined(MLA_FOUR_BIT_STEPS)
// A block's 4 vectors of the rows' words (row i's word w in lane i of words[w]) stored as the
// panel's 8 steps.
void store_steps(const four_bit_steps::IntVec words[4], bool mxfp4, uint8_t (*steps)[4 * kPanelRows]) {
  using namespace four_bit_steps;
  for (int w = 0; w < 4; ++w) {
    const WordSteps pair = mxfp4 ? word_steps<true>(words[w]) : word_steps<false>(words[w]);
    for (int odd = 0; odd < 2; ++odd) store_ints(steps[2 * w + odd], pair.step[odd]);
  }
}
#endif

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// Codes of 16 rows' block (16 bytes a row) regrouped into the panel's 8 steps: rows i, i + 4,
// i + 8 and i + 12 in the four 128-bit lanes of vector i, then a 4 x 4 transpose of 32-bit
// words in each lane leaves row j's word w in lane j of words[w]; MXFP4 codes then mapped
// through kE2M1DoubledPlus12. (Zero-masked inserts and unpacks with every lane on: GCC 12's
// plain ones take an undefined source and warn from inside its headers.)
void regroup_block(const uint8_t* const rows[kPanelRows], int64_t offset, bool mxfp4,
                   uint8_t (*steps)[4 * kPanelRows]) {
  const auto row_block = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + offset)); };
  __m512i quad[4];
  for (int i = 0; i < 4; ++i) {
    quad[i] = _mm512_zextsi128_si512(row_block(i));  // the lane numbers are immediates
    quad[i] = _mm512_maskz_inserti32x4(0xffff, quad[i], row_block(i + 4), 1);
    quad[i] = _mm512_maskz_inserti32x4(0xffff, quad[i], row_block(i + 8), 2);
    quad[i] = _mm512_maskz_inserti32x4(0xffff, quad[i], row_block(i + 12), 3);
  }
  const auto low32 = [](__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi32(0xffff, a, b); };
  const auto high32 = [](__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi32(0xffff, a, b); };
  const auto low64 = [](__m512i a, __m512i b) { return _mm512_maskz_unpacklo_epi64(0xff, a, b); };
  const auto high64 = [](__m512i a, __m512i b) { return _mm512_maskz_unpackhi_epi64(0xff, a, b); };
  const __m512i low01 = low32(quad[0], quad[1]), high01 = high32(quad[0], quad[1]);
  const __m512i low23 = low32(quad[2], quad[3]), high23 = high32(quad[2], quad[3]);
  const __m512i words[4] = {low64(low01, low23), high64(low01, low23), low64(high01, high23), high64(high01, high23)};
  store_steps(words, mxfp4, steps);
}
#elif defined(__AVX2__) && defined(__FMA__)
// Codes of 8 rows' block (16 bytes a row) regrouped into the panel's 8 steps: rows 0-3 and
// 4-7 in the two 128-bit lanes, a 4 x 4 transpose of 32-bit words in each; MXFP4 codes then
// mapped through kE2M1DoubledPlus12.
void regroup_block(const uint8_t* const rows[kPanelRows], int64_t offset, bool mxfp4,
                   uint8_t (*steps)[4 * kPanelRows]) {
  __m256i pair[4];
  for (int i = 0; i < 4; ++i)
    pair[i] = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + 4] + offset)),
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + offset)));
  const __m256i low01 = _mm256_unpacklo_epi32(pair[0], pair[1]), high01 = _mm256_unpackhi_epi32(pair[0], pair[1]);
  const __m256i low23 = _mm256_unpacklo_epi32(pair[2], pair[3]), high23 = _mm256_unpackhi_epi32(pair[2], pair[3]);
  const __m256i words[4] = {_mm256_unpacklo_epi64(low01, low23), _mm256_unpackhi_epi64(low01, low23),
                            _mm256_unpacklo_epi64(high01, high23), _mm256_unpackhi_epi64(high01, high23)};
  store_steps(words, mxfp4, steps);
}
#else
void regroup_block(const uint8_t* const rows[kPanelRows], int64_t offset, bool mxfp4,
                   uint8_t (*steps)[4 * kPanelRows]) {
  for (int s = 0; s < kSteps; ++s)
    for (int i = 0; i < kPanelRows; ++i)
      for (int k = 0; k < 4; ++k) {
        const int code = (rows[i][offset + 4 * (s / 2) + k] >> (4 * (s % 2))) & 0x0f;
        steps[s][4 * i + k] = mxfp4 ? kE2M1DoubledPlus12[code] : uint8_t(code);
      }
}
#endif

// The panel of rows [first_row, first_row + n_rows) over blocks [first_block, + n_blocks).
// Rows past n_rows repeat the last row's codes with scale 0.
void build_panel(const LinearWeight& weight, int64_t first_row, int n_rows, int64_t first_block, int64_t n_blocks,
                 Panel& panel) {
  if (is_4bit_panels(weight.format))  // stored in steps already (first_row a multiple of kPanelRows)
    return four_bit_panel_steps(weight, first_row, first_block, n_blocks, panel.codes, panel.scales);
  const bool mxfp4 = weight.format == WeightFormat::Mxfp4;
  const int64_t group = mxfp4 ? kQ8Block : weight.group_size, blocks_per_group = group / kQ8Block;
  const uint8_t* rows[kPanelRows];
  int64_t scale_rows[kPanelRows];
  for (int i = 0; i < kPanelRows; ++i) {
    const int64_t stored_row = weight.row_offset + first_row + std::min(i, n_rows - 1);
    rows[i] = static_cast<const uint8_t*>(weight.data) + stored_row * (weight.stored_cols / 2) + weight.col_offset / 2;
    scale_rows[i] = stored_row * (weight.stored_cols / group) + weight.col_offset / group;
  }
  const auto& half_scales = e8m0_half_scales();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t block = first_block + b, scale_group = block / blocks_per_group;
    regroup_block(rows, block * kQ8Block / 2, mxfp4, panel.codes[b]);
    for (int i = 0; i < kPanelRows; ++i) {
      const int64_t at = scale_rows[i] + scale_group;
      const float scale = mxfp4 ? half_scales[weight.e8m0_scale[at]] : bf16_to_f32(weight.group_scale[at]);
      panel.scales[b][i] = i < n_rows ? scale : 0.0f;
    }
  }
}

// out[t * kPanelRows + i] = sum over the chunk's blocks b of
//   fma(fma(sum_b, x_scale, -x_offset), w_scale_i, running) for kTokens tokens and the
// panel's rows, the integer sums sum_b (with AVX2 widened from 16 bits every kWidenSteps
// steps) exact, so each (row, token) is the same bits whatever block of tokens it is in, and
// with or without VNNI.
template <int kTokens, int kWidenSteps>
void panel_tokens(const Panel& panel, int64_t n_blocks, const ChunkTokens& chunk, int64_t first, float* out) {
  const int8_t* const* values = chunk.values + first;
  const float* const* x_scales = chunk.scales + first;
  const float* const* x_offsets = chunk.offsets + first;
#if defined(MLA_FOUR_BIT_STEPS)
  using namespace four_bit_steps;
  FloatVec acc[kTokens];  // the loops over these arrays unrolled, so they stay in registers
#pragma GCC unroll 8
  for (auto& a : acc) a = zero_floats();
  for (int64_t b = 0; b < n_blocks; ++b) {
    IntVec block_sums[kTokens];
    for (int first_step = 0; first_step < kSteps; first_step += kWidenSteps) {
      IntVec sums[kTokens];
#pragma GCC unroll 8
      for (auto& sum : sums) sum = zero_ints();
#pragma GCC unroll 8
      for (int s = first_step; s < first_step + kWidenSteps; ++s) {
        const IntVec codes = load_ints(panel.codes[b][s]);
        const int64_t at = chunk.starts[b][s % 2] + 4 * (s / 2);
        for (int t = 0; t < kTokens; ++t) {
          int32_t four;
          std::memcpy(&four, values[t] + at, 4);
          sums[t] = add_step(sums[t], codes, four);
        }
      }
#pragma GCC unroll 8
      for (int t = 0; t < kTokens; ++t)
        block_sums[t] = first_step == 0 ? widened(sums[t]) : add_ints(block_sums[t], widened(sums[t]));
    }
    const FloatVec w_scale = load_floats(panel.scales[b]);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t)
      acc[t] = add_scaled(acc[t], block_sums[t], x_scales[t][b], x_offsets[t][b], w_scale);
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) store_floats(out + t * kPanelRows, acc[t]);
#else
  for (int t = 0; t < kTokens; ++t)
    for (int i = 0; i < kPanelRows; ++i) {
      float acc = 0.0f;
      for (int64_t b = 0; b < n_blocks; ++b) {
        int32_t sum = 0;
        for (int s = 0; s < kSteps; ++s)
          for (int k = 0; k < 4; ++k)
            sum += int32_t(panel.codes[b][s][4 * i + k]) * values[t][chunk.starts[b][s % 2] + 4 * (s / 2) + k];
        acc = std::fma(std::fma(float(sum), x_scales[t][b], -x_offsets[t][b]), panel.scales[b][i], acc);
      }
      out[t * kPanelRows + i] = acc;
    }
#endif
}

// y[i] = out[i] (or += for a later chunk) for the panel's first n_rows rows.
void store_rows(const float* out, int n_rows, bool add, float* y) {
#if defined(__AVX2__)
  if (n_rows == kPanelRows) {
    for (int i = 0; i < kPanelRows; i += 8) {
      const __m256 values = _mm256_load_ps(out + i);
      _mm256_storeu_ps(y + i, add ? _mm256_add_ps(_mm256_loadu_ps(y + i), values) : values);
    }
    return;
  }
#endif
  for (int i = 0; i < n_rows; ++i) y[i] = add ? y[i] + out[i] : out[i];
}

// The chunk's view of tokens [tile, tile_end): their values, their scales and offsets from
// first_block on, and where each of its n_blocks blocks begins.
void set_chunk_tokens(const Q8Buffer& x, const float* offsets, int64_t blocks, int64_t tile, int64_t tile_end,
                      int64_t first_block, int64_t n_blocks, ChunkTokens& chunk) {
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int odd = 0; odd < 2; ++odd) chunk.starts[b][odd] = q8_index(blocks, first_block + b, odd);
  for (int64_t t = tile; t < tile_end; ++t) {
    const Q8Activations token = x.token(t);
    chunk.values[t - tile] = token.values;
    chunk.scales[t - tile] = token.scales + first_block;
    chunk.offsets[t - tile] = offsets + t * blocks + first_block;
  }
}

using PanelTokensFn = void (*)(const Panel&, int64_t, const ChunkTokens&, int64_t, float*);
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr PanelTokensFn kInt4Blocks[kMaxBlockTokens] = {panel_tokens<1, 8>, panel_tokens<2, 8>, panel_tokens<3, 8>,
                                                        panel_tokens<4, 8>, panel_tokens<5, 8>, panel_tokens<6, 8>,
                                                        panel_tokens<7, 8>, panel_tokens<8, 8>};
constexpr const PanelTokensFn* kMxfp4Blocks = kInt4Blocks;  // 32-bit sums: nothing to widen
constexpr int64_t kMxfp4BlockTokens = kMaxBlockTokens;
#else
constexpr PanelTokensFn kInt4Blocks[kMaxBlockTokens] = {panel_tokens<1, 8>, panel_tokens<2, 8>, panel_tokens<3, 8>,
                                                        panel_tokens<4, 8>, panel_tokens<5, 8>, panel_tokens<6, 8>};
constexpr PanelTokensFn kMxfp4Blocks[4] = {panel_tokens<1, 4>, panel_tokens<2, 4>, panel_tokens<3, 4>,
                                           panel_tokens<4, 4>};
constexpr int64_t kMxfp4BlockTokens = 4;
#endif

}  // namespace

void gemm_4bit_q8_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                       int64_t n_tokens, float* y, int64_t y_stride) {
  const bool mxfp4 = weight.format == WeightFormat::Mxfp4 || weight.format == WeightFormat::Mxfp4Panels;
  const bool panels = is_4bit_panels(weight.format);
  MLA_CHECK(mxfp4 || weight.format == WeightFormat::Int4Panels ||
                (weight.format == WeightFormat::Int4Group && weight.group_size % kQ8Block == 0),
            "gemm_4bit_q8_rows: needs MXFP4 or INT4 groups of whole 32-column blocks");
  const int64_t blocks = weight.cols / kQ8Block, block_tokens = mxfp4 ? kMxfp4BlockTokens : kMaxBlockTokens;
  const PanelTokensFn* kernels = mxfp4 ? kMxfp4Blocks : kInt4Blocks;
  thread_local std::unique_ptr<Panel> panel = std::make_unique<Panel>();
  thread_local std::unique_ptr<ChunkTokens> chunk = std::make_unique<ChunkTokens>();
  thread_local std::vector<float> offsets;  // [token][block]: offset * scale * sum(q)
  offsets.resize(size_t(n_tokens * blocks));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* scaled_sums = x.token(t).scaled_sums;
    for (int64_t b = 0; b < blocks; ++b)
      offsets[size_t(t * blocks + b)] = float(mxfp4 ? kMxfp4Offset : kInt4Offset) * scaled_sums[b];
  }
  alignas(64) float out[kMaxBlockTokens * kPanelRows];
  for (int64_t tile = 0; tile < n_tokens; tile += kTileTokens) {
    const int64_t tile_end = std::min(n_tokens, tile + kTileTokens);
    for (int64_t first_block = 0; first_block < blocks; first_block += kChunkBlocks) {
      const int64_t n_blocks = std::min(kChunkBlocks, blocks - first_block);
      set_chunk_tokens(x, offsets.data(), blocks, tile, tile_end, first_block, n_blocks, *chunk);
      // Stored panels' steps start at multiples of kPanelRows: the range's first and last may be partial.
      for (int64_t row = panels ? row_begin / kPanelRows * kPanelRows : row_begin; row < row_end; row += kPanelRows) {
        const int64_t first_row = std::max(row, row_begin);
        const int n_rows = int(std::min<int64_t>(row + kPanelRows, row_end) - first_row);
        build_panel(weight, row, n_rows, first_block, n_blocks, *panel);
        for (int64_t t0 = tile; t0 < tile_end; t0 += block_tokens) {
          const int64_t count = std::min(block_tokens, tile_end - t0);
          kernels[count - 1](*panel, n_blocks, *chunk, t0 - tile, out);
          for (int64_t t = 0; t < count; ++t)
            store_rows(out + t * kPanelRows + (first_row - row), n_rows, first_block > 0,
                       y + (t0 + t) * y_stride + (first_row - row_begin));
        }
      }
    }
  }
}

}  // namespace MLASERVE_KERNELS_NS
