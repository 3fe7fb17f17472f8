#include "kernels/bf16_dot_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/bf16_panel_decode.h"
#include "kernels/packed_gemm.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
namespace {

// The fp32 GEMM's loop nest (packed_gemm.cc): token tiles, then pieces of 256 columns, the
// tile's activations rounded and packed once per piece (192 tokens x 128 column pairs x 4
// bytes = 96 KB, L2); then four stored panels at a time (64 rows; 32 KB of the piece, L1)
// against blocks of up to 6 tokens, whose 4 x 6 sums stay in registers: a column pair's step
// loads four panel vectors and broadcasts each token's pair word, 24 vdpbf16ps for 10 loads.
constexpr int64_t kDepth = kPackedGemmDepth;
constexpr int64_t kTileTokens = 192;
constexpr int kBlockTokens = 6;
constexpr int kMostPanels = 4;
constexpr int64_t kPanelRows = kBf16PanelRows;
static_assert(kDepth % 2 == 0, "a piece is whole column pairs");

// A tile's tokens in ceil(n / most) blocks of near-equal sizes: a block of t tokens keeps 4t
// chains, and too few leave the dot pipes waiting on its latency (16 tokens run as 5 + 5 + 6).
struct TokenBlocks {
  int64_t n_tokens, count;
  explicit TokenBlocks(int64_t tokens, int64_t most = kBlockTokens)
      : n_tokens(tokens), count((tokens + most - 1) / most) {}
  int64_t begin(int64_t block) const { return block * n_tokens / count; }
  int64_t end(int64_t block) const { return (block + 1) * n_tokens / count; }
};

// packed[t * 128 + p] = token t's columns k0 + 2p and k0 + 2p + 1
// rounded to bf16 (round to nearest even) as one pair word, the even column in the low half (a
// column past `depth` zero): one broadcast of it feeds vdpbf16ps. Each token's words are a row
// of their own (a store of 8 a step, where a [pair][token] layout took a scalar store a word:
// 1/6 of the kernel's time), 512 bytes apart whatever the depth, so the kernel's broadcasts
// take constant offsets.
constexpr int64_t kPairsPerToken = kDepth / 2;

void pack_pairs(const float* x, int64_t x_stride, int64_t n_tokens, int64_t k0, int64_t depth, uint32_t* packed) {
  for (int64_t token = 0; token < n_tokens; ++token) {
    const float* row = x + token * x_stride + k0;
    uint32_t* out = packed + token * kPairsPerToken;
    for (int64_t c = 0; c < depth; c += 16) {
      const __mmask16 lanes = depth - c >= 16 ? __mmask16(0xffff) : __mmask16((1u << (depth - c)) - 1);
      const __m256i words = __m256i(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, row + c)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c / 2), words);
    }
  }
}

// y[t * y_stride + i - first_row] (+)= the block's sums for rows [first_row, end_row) of its
// kPanels panels (acc[i * kTokens + t]: panel i, token t); adds when `accumulate` (a later piece).
template <int kPanels, int kTokens>
void store_block(const __m512* acc, float* y, int64_t y_stride, int first_row, int end_row, bool accumulate) {
  const bool whole = first_row == 0 && end_row == kPanels * kPanelRows;
#pragma GCC unroll 12
  for (int t = 0; t < kTokens; ++t) {
    float* token_out = y + t * y_stride;  // row i of the block at token_out[i - first_row]
    if (whole) {
#pragma GCC unroll 4
      for (int panel = 0; panel < kPanels; ++panel) {
        float* out = token_out + panel * kPanelRows;
        const __m512 sums = acc[panel * kTokens + t];
        _mm512_storeu_ps(out, accumulate ? _mm512_add_ps(sums, _mm512_loadu_ps(out)) : sums);
      }
      continue;
    }
    alignas(64) float rows[kPanels * kPanelRows];
    for (int panel = 0; panel < kPanels; ++panel) _mm512_store_ps(rows + panel * kPanelRows, acc[panel * kTokens + t]);
    for (int i = first_row; i < end_row; ++i) {
      float& out = token_out[i - first_row];
      out = accumulate ? out + rows[i] : rows[i];
    }
  }
}

// kTokens tokens' pair words (a block of pack_pairs) against kPanels stored panels (panel i at
// panel + i * panel_stride) over `pairs` column pairs. Every loop over tokens and panels is
// unrolled by pragma, so the sums stay in registers.
template <int kPanels, int kTokens, bool kStream = false>
void dot_block(const uint32_t* tokens, const uint16_t* panel, int64_t panel_stride, int64_t pairs, float* y,
               int64_t y_stride, int first_row, int end_row, bool accumulate) {
#pragma GCC unroll 12
  for (int t = 0; t < kTokens; ++t) {  // the outputs, last written a sweep of rows ago, asked for now
    __builtin_prefetch(y + t * y_stride, 1, 3);
    __builtin_prefetch(y + t * y_stride + end_row - first_row - 1, 1, 3);
  }
  __m512 acc[kPanels * kTokens];
#pragma GCC unroll 24
  for (auto& sums : acc) sums = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh rows[kPanels];
#pragma GCC unroll 4
    for (int i = 0; i < kPanels; ++i) {
      rows[i] = __m512bh(_mm512_loadu_si512(panel + i * panel_stride + p * 2 * kPanelRows));
      if constexpr (kStream) simd::prefetch_stream(panel + i * panel_stride + p * 2 * kPanelRows);  // a pair a line
    }
#pragma GCC unroll 12
    for (int t = 0; t < kTokens; ++t) {
      const __m512bh value = __m512bh(_mm512_set1_epi32(int(tokens[t * kPairsPerToken + p])));
#pragma GCC unroll 4
      for (int i = 0; i < kPanels; ++i) acc[i * kTokens + t] = _mm512_dpbf16_ps(acc[i * kTokens + t], rows[i], value);
    }
  }
  store_block<kPanels, kTokens>(acc, y, y_stride, first_row, end_row, accumulate);
}

using BlockKernel = void (*)(const uint32_t*, const uint16_t*, int64_t, int64_t, float*, int64_t, int, int, bool);

// The most tokens a block takes in stream_few_tokens: two panels' 2 x 12 sums in registers.
constexpr int kStreamBlockTokens = 12;
// The most tokens stream_few_tokens takes (two blocks); more run as the GEMM's tiles.
constexpr int64_t kStreamMostTokens = 15;
using BlockKernels = std::array<BlockKernel, kStreamBlockTokens>;  // [tokens - 1]

template <int kPanels, bool kStream, size_t... kCounts>
constexpr BlockKernels block_kernels(std::index_sequence<kCounts...>) {
  return {dot_block<kPanels, int(kCounts) + 1, kStream>...};
}

// kKernels[panels - 1][tokens - 1]; kStreamKernels the same, prefetching, for stream_few_tokens
// from two tokens (one takes kKernels).
constexpr auto kBlockCounts = std::make_index_sequence<kBlockTokens>();
constexpr BlockKernels kKernels[kMostPanels] = {
    block_kernels<1, false>(kBlockCounts), block_kernels<2, false>(kBlockCounts), block_kernels<3, false>(kBlockCounts),
    block_kernels<4, false>(kBlockCounts)};
constexpr BlockKernels kStreamKernels[kMostPanels] = {
    block_kernels<1, true>(std::make_index_sequence<kStreamBlockTokens>()),
    block_kernels<2, true>(std::make_index_sequence<kStreamBlockTokens>()),
    {},
    block_kernels<4, true>(kBlockCounts)};

// Fewer tokens than a GEMM tile (decode, a small batch): memory-bound, so each stored panel is
// read once over the whole depth, with every token's sums in registers — up to 6 tokens four
// panels at a time, 7-12 two (24 chains either way; 13-15 two blocks), the panels one from each
// of as many equal parts of the range (memory streams that run on from panel to panel, as
// bf16_panel_decode.h's kernels read them), prefetched ahead from two tokens on (one token's
// loop runs faster with the hardware prefetchers alone; docs/kernels.md).
// dot_block's chains and piece order are the GEMM's, so a token gets the same bits here as in
// a GEMM block. x is rounded and packed once, piece after piece.
void stream_few_tokens(const uint16_t* stored, int64_t panel_words, int64_t cols, int64_t row_begin, int64_t row_end,
                       const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const int streams = n_tokens <= kBlockTokens ? 4 : 2;
  const TokenBlocks blocks(n_tokens, streams == 4 ? kBlockTokens : kStreamBlockTokens);
  const int64_t pieces = (cols + kDepth - 1) / kDepth, piece_words = n_tokens * kPairsPerToken;
  thread_local std::vector<uint32_t> words;
  words.resize(size_t(pieces * piece_words));
  for (int64_t piece = 0; piece < pieces; ++piece)
    pack_pairs(x, x_stride, n_tokens, piece * kDepth, std::min(kDepth, cols - piece * kDepth),
               words.data() + piece * piece_words);
  const BlockKernels* kernels = n_tokens == 1 ? kKernels : kStreamKernels;
  constexpr int64_t kSumsStride = kMostPanels * kPanelRows;
  alignas(64) float sums[kStreamMostTokens * kSumsStride];  // [token][panel of the group][row]
  // Panels first_panel + i * step for i < count, against every token.
  const auto run_group = [&](int64_t first_panel, int64_t step, int count) {
    for (int64_t piece = 0; piece < pieces; ++piece) {
      const int64_t k0 = piece * kDepth, pairs = (std::min(kDepth, cols - k0) + 1) / 2;
      const uint16_t* panel = stored + first_panel * panel_words + k0 * kPanelRows;
      for (int64_t block = 0; block < blocks.count; ++block) {
        const int64_t begin = blocks.begin(block);
        kernels[count - 1][blocks.end(block) - begin - 1](words.data() + piece * piece_words + begin * kPairsPerToken,
                                                          panel, step * panel_words, pairs, sums + begin * kSumsStride,
                                                          kSumsStride, 0, count * int(kPanelRows), piece > 0);
      }
    }
    int64_t panels[kMostPanels];
    for (int i = 0; i < count; ++i) panels[i] = first_panel + i * step;
    store_panel_sums(sums, kSumsStride, panels, count, n_tokens, row_begin, row_end, y, y_stride);
  };
  const int64_t first_panel = row_begin / kPanelRows;
  const int64_t n_panels = (row_end + kPanelRows - 1) / kPanelRows - first_panel, part = n_panels / streams;
  for (int64_t q = 0; q < part; ++q) run_group(first_panel + q, part, streams);
  for (int64_t panel = first_panel + streams * part; panel < first_panel + n_panels; ++panel) run_group(panel, 0, 1);
}

}  // namespace

bool bf16_dot_gemm_built() { return true; }

void bf16_dot_stored_rows(const uint16_t* stored, int64_t panel_words, int64_t cols, int64_t row_begin, int64_t row_end,
                          const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  struct alignas(64) Pairs {
    uint32_t words[kTileTokens * kPairsPerToken];
  };
  if (n_tokens <= kStreamMostTokens)
    return stream_few_tokens(stored, panel_words, cols, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
  thread_local std::unique_ptr<Pairs> buffer = std::make_unique<Pairs>();
  for (int64_t tile = 0; tile < n_tokens; tile += kTileTokens) {
    const TokenBlocks blocks(std::min(kTileTokens, n_tokens - tile));
    for (int64_t k0 = 0; k0 < cols; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, cols - k0), pairs = (depth + 1) / 2;
      pack_pairs(x + tile * x_stride, x_stride, blocks.n_tokens, k0, depth, buffer->words);
      for (int64_t first = row_begin / kPanelRows * kPanelRows; first < row_end;) {
        const int panels = int(std::min<int64_t>(kMostPanels, (row_end - first + kPanelRows - 1) / kPanelRows));
        const int first_row = int(std::max<int64_t>(0, row_begin - first));
        const int end_row = int(std::min<int64_t>(panels * kPanelRows, row_end - first));
        const uint16_t* panel = stored + first / kPanelRows * panel_words + k0 * kPanelRows;
        float* out = y + tile * y_stride + (std::max(first, row_begin) - row_begin);
        const auto& kernels = kKernels[panels - 1];
        for (int64_t block = 0; block < blocks.count; ++block) {
          const int64_t begin = blocks.begin(block);
          kernels[blocks.end(block) - begin - 1](buffer->words + begin * kPairsPerToken, panel, panel_words, pairs,
                                                 out + begin * y_stride, y_stride, first_row, end_row, k0 > 0);
        }
        first += panels * kPanelRows;
      }
    }
  }
}

#else

bool bf16_dot_gemm_built() { return false; }

void bf16_dot_stored_rows(const uint16_t*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, int64_t, float*,
                          int64_t) {
  fail("the vdpbf16ps GEMM needs a build with AVX512_BF16 (the avx512 kernel build has it)");
}

#endif

void bf16_dot_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                         int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  MLA_CHECK(weight.format == WeightFormat::Bf16Panels, "bf16_dot_panel_rows takes BF16 panels, got {}",
            weight_format_name(weight.format));
  bf16_dot_stored_rows(static_cast<const uint16_t*>(weight.data), bf16_panel_words(weight.cols), weight.cols, row_begin,
                       row_end, x, x_stride, n_tokens, y, y_stride);
}

}  // namespace MLASERVE_KERNELS_NS
