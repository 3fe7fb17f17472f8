#include "kernels/four_bit_panels.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/amx_gemm.h"
#include "kernels/gemm_4bit.h"
#include "kernels/simd.h"

namespace mlaserve {

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
namespace {

constexpr int kRows = int(kFourBitPanelRows);
constexpr int kMaxTokens = 8;         // 8 int32 sums and 8 accumulators in registers
constexpr int64_t kChunkBlocks = 32;  // gemm_4bit.cc's chunks: the same sums added in the same order
constexpr int64_t kBlockCodeBytes = 16 * kRows;

// What a block of up to kMaxTokens tokens reads: per token its int8 values, and per block of
// 32 columns its scale and its scale times the sum of its values (Q8Activations).
struct TokenBlock {
  const int8_t* values[kMaxTokens];
  const float* scales[kMaxTokens];
  const float* scaled_sums[kMaxTokens];
};

// The 16 rows' scales of block b in fp32: INT4 a bf16 per group (its high half); MXFP4 the
// E8M0 exponent e as 2^(e - 128) (e8m0_half_scales: exponent field e - 1 for e >= 2; e = 1 and
// 0 are the subnormals 2^-127 and 2^-128, bits 22 and 21).
template <bool kMxfp4>
__m512 block_scales(const uint8_t* scales, int64_t block, int64_t blocks_per_group) {
  if constexpr (kMxfp4) {
    const __m512i e = _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales + block * kRows)));
    const __m512i normal = _mm512_maskz_slli_epi32(0xffff, _mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_maskz_sllv_epi32(0xffff, _mm512_set1_epi32(1 << 21), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(2)), subnormal, normal));
  }
  const auto* bf16 = reinterpret_cast<const __m256i*>(scales + block / blocks_per_group * kRows * 2);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(bf16)), 16));
}

// The two integer-GEMM steps in a vector of 16 rows' stored words: the low nibbles and the
// high ones, each an unsigned code a byte (MXFP4 through kE2M1DoubledPlus12).
struct WordSteps {
  __m512i step[2];
};
template <bool kMxfp4>
WordSteps word_steps(__m512i word) {
  const __m512i low_nibbles = _mm512_set1_epi8(0x0f);
  WordSteps steps = {{_mm512_and_si512(word, low_nibbles), _mm512_and_si512(_mm512_srli_epi16(word, 4), low_nibbles)}};
  if constexpr (kMxfp4) {
    const __m512i table =
        _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(kE2M1DoubledPlus12)));
    for (auto& step : steps.step) step = _mm512_shuffle_epi8(table, step);
  }
  return steps;
}

// out[(p * kTokens + t) * 16 + i] = row i of panel p (codes[p], scales[p]) against token t of
// `tokens` over blocks [first_block, end_block) of the row's `blocks` (a chunk). Step 2w
// (2w + 1) of a block is the low (high) nibbles of its word w: row i's columns 8w + {0, 2, 4,
// 6} (+ 1), which Q8Buffer keeps as 4 bytes at the block's evens (odds) start + 4w. kPanels
// panels at once are as many memory streams (decode reads one token's panels from memory).
template <int kPanels, int kTokens, bool kMxfp4>
void panel_chunk(const uint8_t* const codes[kPanels], const uint8_t* const scales[kPanels], int64_t first_block,
                 int64_t end_block, int64_t blocks, int64_t blocks_per_group, const TokenBlock& tokens, float* out) {
  const float offset = float(kMxfp4 ? kMxfp4Offset : kInt4Offset);
  __m512 acc[kPanels * kTokens];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t b = first_block; b < end_block; ++b) {
    const int64_t starts[2] = {q8_index(blocks, b, 0), q8_index(blocks, b, 1)};
    __m512i sums[kPanels * kTokens];
    for (auto& sum : sums) sum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int w = 0; w < 4; ++w) {
      int32_t four[2][kTokens];
      for (int odd = 0; odd < 2; ++odd)
        for (int t = 0; t < kTokens; ++t) std::memcpy(&four[odd][t], tokens.values[t] + starts[odd] + 4 * w, 4);
#pragma GCC unroll 4
      for (int p = 0; p < kPanels; ++p) {
        const uint8_t* line = codes[p] + b * kBlockCodeBytes + 64 * w;
        const WordSteps steps = word_steps<kMxfp4>(_mm512_load_si512(line));
        simd::prefetch_stream(line);
#pragma GCC unroll 2
        for (int odd = 0; odd < 2; ++odd)
          for (int t = 0; t < kTokens; ++t)  // u <= 24 and |q| <= 127: a block's 32 products sum within +-97536
            sums[p * kTokens + t] =
                _mm512_dpbusd_epi32(sums[p * kTokens + t], steps.step[odd], _mm512_set1_epi32(four[odd][t]));
      }
    }
    for (int p = 0; p < kPanels; ++p) {
      const __m512 w_scale = block_scales<kMxfp4>(scales[p], b, blocks_per_group);
      for (int t = 0; t < kTokens; ++t) {
        const __m512 sum = _mm512_maskz_cvtepi32_ps(0xffff, sums[p * kTokens + t]);
        const __m512 scaled = _mm512_fmsub_ps(sum, _mm512_set1_ps(tokens.scales[t][b]),
                                              _mm512_set1_ps(offset * tokens.scaled_sums[t][b]));
        acc[p * kTokens + t] = _mm512_fmadd_ps(scaled, w_scale, acc[p * kTokens + t]);
      }
    }
  }
  for (int i = 0; i < kPanels * kTokens; ++i) _mm512_store_ps(out + i * kRows, acc[i]);
}

using PanelChunk = void (*)(const uint8_t* const*, const uint8_t* const*, int64_t, int64_t, int64_t, int64_t,
                            const TokenBlock&, float*);
template <int kPanels, bool kMxfp4, int... kTokens>
constexpr PanelChunk kChunks[] = {panel_chunk<kPanels, kTokens, kMxfp4>...};
// [panels at once: 0 for 1, 1 for 2, 2 for 4][format][tokens - 1]
constexpr const PanelChunk* kChunkKernels[3][2] = {
    {kChunks<1, false, 1, 2, 3, 4, 5, 6, 7, 8>, kChunks<1, true, 1, 2, 3, 4, 5, 6, 7, 8>},
    {kChunks<2, false, 1, 2, 3, 4>, kChunks<2, true, 1, 2, 3, 4>},
    {kChunks<4, false, 1, 2>, kChunks<4, true, 1, 2>}};

// One 4-bit panel weight's layout, and the kernels' outputs to y.
struct PanelWeight {
  bool mxfp4;
  int64_t blocks, blocks_per_group, code_bytes, scale_bytes;
  const uint8_t *codes, *scales;
  explicit PanelWeight(const LinearWeight& weight)
      : mxfp4(weight.format == WeightFormat::Mxfp4Panels),
        blocks(weight.cols / kQ8Block),
        blocks_per_group(mxfp4 ? 1 : weight.group_size / kQ8Block),
        code_bytes(kRows * weight.cols / 2),
        scale_bytes(kRows * (blocks / blocks_per_group) * (mxfp4 ? 1 : 2)),
        codes(static_cast<const uint8_t*>(weight.data)),
        scales(mxfp4 ? weight.e8m0_scale : reinterpret_cast<const uint8_t*>(weight.group_scale)) {}

  // Chunk `first_block` of n_panels panels (panels[]) against the tokens, added to (or, for the
  // first chunk, stored in) rows [row_begin, row_end) of y.
  void run_chunk(const int64_t* panels, int n_panels, int64_t first_block, const TokenBlock& tokens, int64_t n_tokens,
                 int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) const {
    const uint8_t* panel_codes[4];
    const uint8_t* panel_scales[4];
    for (int p = 0; p < n_panels; ++p) {
      panel_codes[p] = codes + panels[p] * code_bytes;
      panel_scales[p] = scales + panels[p] * scale_bytes;
    }
    alignas(64) float out[4 * kMaxTokens * kRows];
    const int64_t end_block = std::min(blocks, first_block + kChunkBlocks);
    kChunkKernels[n_panels / 2][mxfp4][n_tokens - 1](panel_codes, panel_scales, first_block, end_block, blocks,
                                                      blocks_per_group, tokens, out);
    for (int p = 0; p < n_panels; ++p) {
      const int64_t first_row = std::max(row_begin, panels[p] * kRows), end_row = std::min(row_end, (panels[p] + 1) * kRows);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const float* from = out + (p * n_tokens + t) * kRows + first_row - panels[p] * kRows;
        float* to = y + t * y_stride + first_row - row_begin;
        for (int64_t i = 0; i < end_row - first_row; ++i) to[i] = first_block == 0 ? from[i] : to[i] + from[i];
      }
    }
  }
};

TokenBlock token_block(const Q8Buffer& x, int64_t count) {
  TokenBlock tokens;
  for (int64_t t = 0; t < count; ++t) {
    const Q8Activations token = x.token(t);
    tokens.values[t] = token.values;
    tokens.scales[t] = token.scales;
    tokens.scaled_sums[t] = token.scaled_sums;
  }
  return tokens;
}

// Up to 8 tokens (decode: one sequence or a batch): the range's panels streamed once each, over
// the whole depth — 4 at a time for 1-2 tokens, 2 for 3-4, one from each of as many equal parts
// of the range (so each memory stream runs on from panel to panel), the leftovers one at a time.
void few_token_rows(const PanelWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x, int64_t n_tokens,
                    float* y, int64_t y_stride) {
  const TokenBlock tokens = token_block(x, n_tokens);
  const int spread = n_tokens <= 2 ? 4 : n_tokens <= 4 ? 2 : 1;
  const int64_t first_panel = row_begin / kRows, n_panels = (row_end + kRows - 1) / kRows - first_panel;
  const int64_t part = n_panels / spread;
  const auto run = [&](const int64_t* panels, int count) {
    for (int64_t block = 0; block < weight.blocks; block += kChunkBlocks)
      weight.run_chunk(panels, count, block, tokens, n_tokens, row_begin, row_end, y, y_stride);
  };
  for (int64_t q = 0; q < part; ++q) {
    int64_t panels[4];
    for (int p = 0; p < spread; ++p) panels[p] = first_panel + p * part + q;
    run(panels, spread);
  }
  for (int64_t panel = first_panel + spread * part; panel < first_panel + n_panels; ++panel) run(&panel, 1);
}

}  // namespace

bool four_bit_panels_run_here() { return !amx_available(); }

void four_bit_panel_steps(const LinearWeight& weight, int64_t panel, int64_t first_block, int64_t n_blocks,
                          uint8_t (*steps)[8][4 * kFourBitPanelRows], float (*scales)[kFourBitPanelRows]) {
  const PanelWeight panels(weight);
  const uint8_t* codes = panels.codes + panel * panels.code_bytes;
  const uint8_t* panel_scales = panels.scales + panel * panels.scale_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int w = 0; w < 4; ++w) {
      const __m512i word = _mm512_load_si512(codes + (first_block + b) * kBlockCodeBytes + 64 * w);
      const WordSteps pair = panels.mxfp4 ? word_steps<true>(word) : word_steps<false>(word);
      for (int odd = 0; odd < 2; ++odd) _mm512_store_si512(steps[b][2 * w + odd], pair.step[odd]);
    }
    _mm512_store_ps(scales[b], panels.mxfp4 ? block_scales<true>(panel_scales, first_block + b, 1)
                                            : block_scales<false>(panel_scales, first_block + b, panels.blocks_per_group));
  }
}

// More tokens: the integer GEMM (gemm_4bit.h), its panels' steps split from the stored words
// (four_bit_panel_steps) rather than regrouped from rows.
void four_bit_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                         int64_t n_tokens, float* y, int64_t y_stride) {
  MLA_CHECK(is_4bit_panels(weight.format), "four_bit_panel_rows: a {} weight", weight_format_name(weight.format));
  const PanelWeight panels(weight);
  if (n_tokens <= kMaxTokens) return few_token_rows(panels, row_begin, row_end, x, n_tokens, y, y_stride);
  gemm_4bit_q8_rows(weight, row_begin, row_end, x, n_tokens, y, y_stride);
}

#else

bool four_bit_panels_run_here() { return false; }

void four_bit_panel_rows(const LinearWeight& weight, int64_t, int64_t, const Q8Buffer&, int64_t, float*, int64_t) {
  MLA_CHECK(false, "a {} weight needs a build with AVX-512 VNNI (-march=native on a host that has it)",
            weight_format_name(weight.format));
}

void four_bit_panel_steps(const LinearWeight& weight, int64_t, int64_t, int64_t, uint8_t (*)[8][4 * kFourBitPanelRows],
                          float (*)[kFourBitPanelRows]) {
  MLA_CHECK(false, "a {} weight needs a build with AVX-512 VNNI", weight_format_name(weight.format));
}

#endif

}  // namespace mlaserve
