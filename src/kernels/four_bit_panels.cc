#include "kernels/four_bit_panels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/four_bit_steps.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

#if defined(MLA_FOUR_BIT_STEPS)
namespace {

using namespace four_bit_steps;

// A unit is the kFourBitStepRows rows one register of int32 lanes covers: a whole stored panel
// with AVX-512, half of one (32 bytes of each 64-byte line) with AVX2.
constexpr int kUnitRows = kFourBitStepRows;
constexpr int kMaxTokens = kFourBitPanelMaxTokens;
constexpr int kMaxUnits = 4;          // units streamed at once
constexpr int64_t kChunkBlocks = 32;  // gemm_4bit.cc's chunks: the same sums added in the same order
constexpr int64_t kBlockCodeBytes = 16 * kFourBitPanelRows;

// What a block of up to kMaxTokens tokens reads: per token its int8 values, and per block of
// 32 columns its scale and its scale times the sum of its values (Q8Activations).
struct TokenBlock {
  const int8_t* values[kMaxTokens];
  const float* scales[kMaxTokens];
  const float* scaled_sums[kMaxTokens];
};

// A unit's scales of block b in fp32 (`scales` its first row's of block 0): INT4 one per group,
// MXFP4 one per block.
template <bool kMxfp4>
FloatVec block_scales(const uint8_t* scales, int64_t block, int64_t blocks_per_group) {
  if constexpr (kMxfp4) return mxfp4_scales(scales + block * kFourBitPanelRows);
  return int4_scales(scales + block / blocks_per_group * kFourBitPanelRows * 2);
}

// out[(u * kTokens + t) * kUnitRows + i] = row i of unit u (codes[u], scales[u]) against token
// t of `tokens` over blocks [first_block, end_block) of the row's `blocks` (a chunk). Step 2w
// (2w + 1) of a block is the low (high) nibbles of its word w: row i's columns 8w + {0, 2, 4,
// 6} (+ 1), which Q8Buffer keeps as 4 bytes at the block's evens (odds) start + 4w. Each
// block's int32 sums are exact, then take the integer GEMM's float steps. kUnits units at once
// are as many memory streams (decode reads one token's panels from memory).
template <int kUnits, int kTokens, bool kMxfp4>
void unit_chunk(const uint8_t* const codes[kUnits], const uint8_t* const scales[kUnits], int64_t first_block,
                int64_t end_block, int64_t blocks, int64_t blocks_per_group, const TokenBlock& tokens, float* out) {
  constexpr int kWidenWords = widen_words(kMxfp4);
  const float offset = float(kMxfp4 ? kMxfp4Offset : kInt4Offset);
  FloatVec acc[kUnits * kTokens];  // the loops over these arrays unrolled, so they stay in registers
#pragma GCC unroll 16
  for (auto& a : acc) a = zero_floats();
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t starts[2] = {q8_index(blocks, b, 0), q8_index(blocks, b, 1)};
    IntVec sums[kUnits * kTokens], block_sums[kUnits * kTokens];
#pragma GCC unroll 16
    for (auto& sum : sums) sum = zero_ints();
#pragma GCC unroll 4
    for (int w = 0; w < 4; ++w) {
      int32_t four[2][kTokens];
      for (int odd = 0; odd < 2; ++odd)
        for (int t = 0; t < kTokens; ++t) std::memcpy(&four[odd][t], tokens.values[t] + starts[odd] + 4 * w, 4);
#pragma GCC unroll 4
      for (int u = 0; u < kUnits; ++u) {
        const uint8_t* line = codes[u] + b * kBlockCodeBytes + 64 * w;
        const WordSteps steps = word_steps<kMxfp4>(load_ints(line));
        simd::prefetch_stream(line);
#pragma GCC unroll 2
        for (int odd = 0; odd < 2; ++odd)
          for (int t = 0; t < kTokens; ++t)
            sums[u * kTokens + t] = add_step(sums[u * kTokens + t], steps.step[odd], four[odd][t]);
      }
      if ((w + 1) % kWidenWords != 0) continue;
#pragma GCC unroll 16
      for (int i = 0; i < kUnits * kTokens; ++i) {
        block_sums[i] = w + 1 == kWidenWords ? widened(sums[i]) : add_ints(block_sums[i], widened(sums[i]));
        sums[i] = zero_ints();
      }
    }
#pragma GCC unroll 4
    for (int u = 0; u < kUnits; ++u) {
      const FloatVec w_scale = block_scales<kMxfp4>(scales[u], b, blocks_per_group);
      for (int t = 0; t < kTokens; ++t)
        acc[u * kTokens + t] = add_scaled(acc[u * kTokens + t], block_sums[u * kTokens + t], tokens.scales[t][b],
                                          offset * tokens.scaled_sums[t][b], w_scale);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kUnits * kTokens; ++i) store_floats(out + i * kUnitRows, acc[i]);
}

// Block `block` of a unit split into the integer GEMM's 8 steps and its fp32 block scales.
template <bool kMxfp4>
void split_block(const uint8_t* codes, const uint8_t* scales, int64_t block, int64_t blocks_per_group,
                 uint8_t (*steps)[4 * kUnitRows], float* block_scale) {
  for (int w = 0; w < 4; ++w) {
    const WordSteps pair = word_steps<kMxfp4>(load_ints(codes + block * kBlockCodeBytes + 64 * w));
    for (int odd = 0; odd < 2; ++odd) store_ints(steps[2 * w + odd], pair.step[odd]);
  }
  store_floats(block_scale, block_scales<kMxfp4>(scales, block, blocks_per_group));
}

using PanelChunk = void (*)(const uint8_t* const*, const uint8_t* const*, int64_t, int64_t, int64_t, int64_t,
                            const TokenBlock&, float*);
template <int kUnits, bool kMxfp4, int... kTokens>
constexpr PanelChunk kChunks[] = {unit_chunk<kUnits, kTokens, kMxfp4>...};
// [units at once: 0 for 1, 1 for 2, 2 for 4][format][tokens - 1], as few_token_plan asks.
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
constexpr const PanelChunk* kChunkKernels[3][2] = {
    {kChunks<1, false, 1, 2, 3, 4, 5, 6, 7, 8>, kChunks<1, true, 1, 2, 3, 4, 5, 6, 7, 8>},
    {kChunks<2, false, 1, 2, 3, 4>, kChunks<2, true, 1, 2, 3, 4>},
    {kChunks<4, false, 1, 2>, kChunks<4, true, 1, 2>}};
#else
constexpr const PanelChunk* kChunkKernels[3][2] = {{kChunks<1, false, 1, 2, 3, 4>, kChunks<1, true, 1, 2, 3, 4>},
                                                   {kChunks<2, false, 1, 2, 3, 4>, kChunks<2, true, 1, 2, 3, 4>},
                                                   {kChunks<4, false, 1, 2>, kChunks<4, true, 1, 2>}};
#endif

// How the few-token path reads a range for n tokens: `streams` equal parts of it at once (one
// memory stream each runs on from unit to unit), `group` neighbouring units of each part a call,
// and at most `tokens_per_call` tokens a call (the chunk's further tokens read its units from
// cache). AVX-512: 4 streams for 1-2 tokens, 2 for 3-4, all tokens in one call. AVX2: a panel's
// two halves together (they share its lines), 2 streams for 1-2 tokens, 4 tokens a call; with
// 16 ymm, 8 units and tokens of sums and accumulators spill, yet measured faster than fewer
// streams (docs/kernels.md, "4-bit panels").
struct FewTokenPlan {
  int streams, group, tokens_per_call;
};
FewTokenPlan few_token_plan(int64_t n_tokens) {
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  return {n_tokens <= 2 ? 4 : n_tokens <= 4 ? 2 : 1, 1, kMaxTokens};
#else
  return {n_tokens <= 2 ? 2 : 1, 2, int(std::min<int64_t>(n_tokens, 4))};
#endif
}

// One 4-bit panel weight's layout, and the kernels' outputs to y.
struct PanelWeight {
  bool mxfp4;
  int64_t blocks, blocks_per_group, code_bytes, scale_bytes;
  const uint8_t *codes, *scales;
  explicit PanelWeight(const LinearWeight& weight)
      : mxfp4(weight.format == WeightFormat::Mxfp4Panels),
        blocks(weight.cols / kQ8Block),
        blocks_per_group(mxfp4 ? 1 : weight.group_size / kQ8Block),
        code_bytes(kFourBitPanelRows * weight.cols / 2),
        scale_bytes(kFourBitPanelRows * (blocks / blocks_per_group) * (mxfp4 ? 1 : 2)),
        codes(static_cast<const uint8_t*>(weight.data)),
        scales(mxfp4 ? weight.e8m0_scale : reinterpret_cast<const uint8_t*>(weight.group_scale)) {}

  // Where unit `unit` (rows unit * kUnitRows on) begins in the codes and the scales.
  const uint8_t* unit_codes(int64_t unit) const {
    return codes + unit * kUnitRows / kFourBitPanelRows * code_bytes + 4 * (unit * kUnitRows % kFourBitPanelRows);
  }
  const uint8_t* unit_scales(int64_t unit) const {
    return scales + unit * kUnitRows / kFourBitPanelRows * scale_bytes +
           (mxfp4 ? 1 : 2) * (unit * kUnitRows % kFourBitPanelRows);
  }

  // Chunk `first_block` of n_units units (units[]) against the tokens, added to (or, for the
  // first chunk, stored in) rows [row_begin, row_end) of y.
  void run_chunk(const int64_t* units, int n_units, int64_t first_block, const TokenBlock& tokens, int64_t n_tokens,
                 int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) const {
    const uint8_t* codes_of[kMaxUnits];
    const uint8_t* scales_of[kMaxUnits];
    for (int u = 0; u < n_units; ++u) {
      codes_of[u] = unit_codes(units[u]);
      scales_of[u] = unit_scales(units[u]);
    }
    alignas(64) float out[kMaxUnits * kMaxTokens * kUnitRows];
    const int64_t end_block = std::min(blocks, first_block + kChunkBlocks);
    kChunkKernels[n_units / 2][mxfp4][n_tokens - 1](codes_of, scales_of, first_block, end_block, blocks,
                                                    blocks_per_group, tokens, out);
    for (int u = 0; u < n_units; ++u) {
      const int64_t first_row = std::max(row_begin, units[u] * kUnitRows);
      const int64_t end_row = std::min(row_end, (units[u] + 1) * kUnitRows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* from = out + (u * n_tokens + t) * kUnitRows + first_row - units[u] * kUnitRows;
        float* to = y + t * y_stride + first_row - row_begin;
        for (int64_t i = 0; i < end_row - first_row; ++i) to[i] = first_block == 0 ? from[i] : to[i] + from[i];
      }
    }
  }
};

TokenBlock token_block(const Q8Buffer& x, int64_t first, int64_t count) {
  TokenBlock tokens;
  for (int64_t t = 0; t < count; ++t) {
    const Q8Activations token = x.token(first + t);
    tokens.values[t] = token.values;
    tokens.scales[t] = token.scales;
    tokens.scaled_sums[t] = token.scaled_sums;
  }
  return tokens;
}

// Up to 8 tokens (decode: one sequence or a batch): the range's units streamed once each, over
// the whole depth, as few_token_plan says; the leftover units one at a time.
void few_token_rows(const PanelWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x, int64_t n_tokens,
                    float* y, int64_t y_stride) {
  const FewTokenPlan plan = few_token_plan(n_tokens);
  TokenBlock token_blocks[kMaxTokens];
  for (int64_t t0 = 0; t0 < n_tokens; t0 += plan.tokens_per_call)
    token_blocks[t0 / plan.tokens_per_call] =
        token_block(x, t0, std::min<int64_t>(plan.tokens_per_call, n_tokens - t0));
  const int64_t first_unit = row_begin / kUnitRows, n_units = (row_end + kUnitRows - 1) / kUnitRows - first_unit;
  const int64_t part = n_units / (plan.streams * plan.group) * plan.group;
  const auto run = [&](const int64_t* units, int count) {
    for (int64_t block = 0; block < weight.blocks; block += kChunkBlocks)
      for (int64_t t0 = 0; t0 < n_tokens; t0 += plan.tokens_per_call)
        weight.run_chunk(units, count, block, token_blocks[t0 / plan.tokens_per_call],
                         std::min<int64_t>(plan.tokens_per_call, n_tokens - t0), row_begin, row_end, y + t0 * y_stride,
                         y_stride);
  };
  for (int64_t q = 0; q < part; q += plan.group) {
    int64_t units[kMaxUnits];
    for (int s = 0; s < plan.streams; ++s)
      for (int g = 0; g < plan.group; ++g) units[s * plan.group + g] = first_unit + s * part + q + g;
    run(units, plan.streams * plan.group);
  }
  for (int64_t unit = first_unit + plan.streams * part; unit < first_unit + n_units; ++unit) run(&unit, 1);
}

}  // namespace

bool four_bit_panels_built() { return true; }

void four_bit_panel_steps(const LinearWeight& weight, int64_t first_row, int64_t first_block, int64_t n_blocks,
                          uint8_t (*steps)[8][4 * kFourBitStepRows], float (*scales)[kFourBitStepRows]) {
  const PanelWeight panels(weight);
  const uint8_t* codes = panels.unit_codes(first_row / kUnitRows);
  const uint8_t* unit_scales = panels.unit_scales(first_row / kUnitRows);
  for (int64_t b = 0; b < n_blocks; ++b) {
    if (panels.mxfp4)
      split_block<true>(codes, unit_scales, first_block + b, 1, steps[b], scales[b]);
    else
      split_block<false>(codes, unit_scales, first_block + b, panels.blocks_per_group, steps[b], scales[b]);
  }
}

void four_bit_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                         int64_t n_tokens, float* y, int64_t y_stride) {
  MLA_CHECK(is_4bit_panels(weight.format), "four_bit_panel_rows: a {} weight", weight_format_name(weight.format));
  const PanelWeight panels(weight);
  MLA_CHECK(n_tokens <= kMaxTokens, "four_bit_panel_rows: {} tokens, at most {}", n_tokens, kMaxTokens);
  few_token_rows(panels, row_begin, row_end, x, n_tokens, y, y_stride);
}

#else

bool four_bit_panels_built() { return false; }

void four_bit_panel_rows(const LinearWeight& weight, int64_t, int64_t, const Q8Buffer&, int64_t, float*, int64_t) {
  MLA_CHECK(
      false,
      "a {} weight needs a build with AVX2 and FMA, or AVX-512 VNNI (the avx2 and avx512 kernel builds have them)",
      weight_format_name(weight.format));
}

void four_bit_panel_steps(const LinearWeight& weight, int64_t, int64_t, int64_t, uint8_t (*)[8][4 * kFourBitStepRows],
                          float (*)[kFourBitStepRows]) {
  MLA_CHECK(false, "a {} weight needs a build with AVX2 and FMA, or AVX-512 VNNI", weight_format_name(weight.format));
}

#endif

}  // namespace MLASERVE_KERNELS_NS
