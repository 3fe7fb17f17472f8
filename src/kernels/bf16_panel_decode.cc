#include "kernels/bf16_panel_decode.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/packed_gemm.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

constexpr int64_t kDepth = kPackedGemmDepth;
constexpr int64_t kPanelRows = kBf16PanelRows;

#if defined(__AVX2__) && defined(__FMA__)
// sums[(t * kPanels + p) * 16 + i] = row i of panels[p] . x_t (x_t = x + t * x_stride) for
// kTokens tokens: kPanels panels read together (kPanels memory streams), each column pair
// widened once for all the tokens. Every (row, token) sum runs in the packed GEMM's order —
// one FMA chain over each piece of kDepth columns, the pieces added in turn — so a token gets
// the same bits alone, in a few tokens or in a GEMM block (LinearBf16Panels.AnyTokenCountGives
// TheSingleTokenBits); 2 x kPanels x kTokens chains cover the FMA latency (8 for 4 panels x 1
// token and 2 panels x 2 tokens).
struct YmmDots {
  template <int kPanels, int kTokens>
  static void dot(const uint16_t* const panels[kPanels], const float* x, int64_t x_stride, int64_t cols, float* sums) {
    for (int64_t k0 = 0; k0 < cols; k0 += kDepth) {
      __m256 acc[2 * kPanels * kTokens];
      for (auto& a : acc) a = _mm256_setzero_ps();
      const int64_t end = std::min(cols, k0 + kDepth);
      for (int64_t k = k0; k < end; k += 2)  // a column pair a step (a lone last column: its first)
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
          __m256 rows_0_7[2], rows_8_15[2];  // [column k, k + 1]
          simd::load_bf16_pairs(panels[p] + bf16_panel_index(0, k), rows_0_7[0], rows_0_7[1]);
          simd::load_bf16_pairs(panels[p] + bf16_panel_index(8, k), rows_8_15[0], rows_8_15[1]);
          simd::prefetch_stream(panels[p] + k * kPanelRows);  // a pair a line
#pragma GCC unroll 2
          for (int column = 0; column < 2; ++column) {
            if (column == 1 && k + 1 == end) break;
#pragma GCC unroll 3
            for (int t = 0; t < kTokens; ++t) {
              const __m256 value = _mm256_broadcast_ss(x + t * x_stride + k + column);
              __m256* chain = acc + 2 * (t * kPanels + p);
              chain[0] = _mm256_fmadd_ps(value, rows_0_7[column], chain[0]);
              chain[1] = _mm256_fmadd_ps(value, rows_8_15[column], chain[1]);
            }
          }
        }
      for (int i = 0; i < 2 * kPanels * kTokens; ++i) {
        float* out = sums + 8 * i;
        _mm256_storeu_ps(out, k0 == 0 ? acc[i] : _mm256_add_ps(acc[i], _mm256_loadu_ps(out)));
      }
    }
  }
};
#endif

#if defined(__AVX512F__)
// YmmDots with one vector a panel and token: kPanels x kTokens chains (16 for 2 panels x 8
// tokens), each column pair one load widened into both columns' 16 rows; the same chains and
// order.
struct ZmmDots {
  template <int kPanels, int kTokens>
  static void dot(const uint16_t* const panels[kPanels], const float* x, int64_t x_stride, int64_t cols, float* sums) {
    for (int64_t k0 = 0; k0 < cols; k0 += kDepth) {
      __m512 acc[kPanels * kTokens];
#pragma GCC unroll 16
      for (auto& a : acc) a = _mm512_setzero_ps();
      const int64_t end = std::min(cols, k0 + kDepth);
      for (int64_t k = k0; k < end; k += 2) {  // a column pair a step (a lone last column: its first)
        __m512 columns[2][kPanels];            // [column k, k + 1][panel]
#pragma GCC unroll 4
        for (int p = 0; p < kPanels; ++p) {
          simd::load_bf16_pairs(panels[p] + k * kPanelRows, columns[0][p], columns[1][p]);
          __asm__("" : "+v"(columns[0][p]), "+v"(columns[1][p]));  // loaded once for the tokens (see simd::dot_4xn)
          simd::prefetch_stream(panels[p] + k * kPanelRows);       // a pair a line
        }
#pragma GCC unroll 2
        for (int column = 0; column < 2; ++column) {
          if (column == 1 && k + 1 == end) break;
#pragma GCC unroll 8
          for (int t = 0; t < kTokens; ++t) {
            const __m512 value = _mm512_set1_ps(x[t * x_stride + k + column]);
#pragma GCC unroll 4
            for (int p = 0; p < kPanels; ++p)
              acc[t * kPanels + p] = _mm512_fmadd_ps(value, columns[column][p], acc[t * kPanels + p]);
          }
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < kPanels * kTokens; ++i) {
        float* out = sums + 16 * i;
        _mm512_storeu_ps(out, k0 == 0 ? acc[i] : _mm512_add_ps(acc[i], _mm512_loadu_ps(out)));
      }
    }
  }
};

// kTokens (4-8) tokens of x against panels [panel, panel + n) (n <= 2), rows
// [row_begin, row_end) of them stored to y.
template <int kTokens>
void bf16_panel_pair_tokens(const LinearWeight& weight, int64_t panel, int n, int64_t row_begin, int64_t row_end,
                            const float* x, int64_t x_stride, float* y, int64_t y_stride) {
  const auto* stored = static_cast<const uint16_t*>(weight.data);
  const int64_t cols = weight.cols;
  alignas(64) float sums[kTokens * 2 * kPanelRows];
  const int64_t panel_words = bf16_panel_words(cols);
  const uint16_t* data[2] = {stored + panel * panel_words, stored + (panel + n - 1) * panel_words};
  if (n == 2)
    ZmmDots::dot<2, kTokens>(data, x, x_stride, cols, sums);
  else
    ZmmDots::dot<1, kTokens>(data, x, x_stride, cols, sums);
  const int64_t panels[2] = {panel, panel + 1};
  store_panel_sums(sums, n * kPanelRows, panels, n, kTokens, row_begin, row_end, y, y_stride);
}

// 5-15 tokens: the range's panels a pair at a time (two memory streams, prefetched), each pair
// against the tokens in blocks of up to 8 (12 tokens as 6 + 6), the later blocks finding the
// pair in L2.
void bf16_panel_pairs(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride) {
  using Kernel = void (*)(const LinearWeight&, int64_t, int, int64_t, int64_t, const float*, int64_t, float*, int64_t);
  static constexpr Kernel kKernels[8] = {nullptr,
                                         nullptr,
                                         nullptr,
                                         bf16_panel_pair_tokens<4>,
                                         bf16_panel_pair_tokens<5>,
                                         bf16_panel_pair_tokens<6>,
                                         bf16_panel_pair_tokens<7>,
                                         bf16_panel_pair_tokens<8>};
  const int64_t blocks = (n_tokens + 7) / 8, end_panel = (row_end + kPanelRows - 1) / kPanelRows;
  for (int64_t panel = row_begin / kPanelRows; panel < end_panel; panel += 2) {
    const int n = int(std::min<int64_t>(2, end_panel - panel));
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t first = block * n_tokens / blocks, count = (block + 1) * n_tokens / blocks - first;
      kKernels[count - 1](weight, panel, n, row_begin, row_end, x + first * x_stride, x_stride, y + first * y_stride,
                          y_stride);
    }
  }
}
#endif

// y[t * y_stride + r - row_begin] = W[r] . x_t for kTokens tokens of a Bf16Panels weight, each
// panel read once: the range's panels kSpread at a time, one from each of kSpread equal parts
// (kSpread memory streams in flight where one stream leaves memory idle), the leftovers one at
// a time. Fewer tokens than a GEMM block: the block kernel
// would read one stream, with too few accumulator chains (2 tokens ran at half rate). Dots is
// YmmDots or ZmmDots.
template <class Dots, int kTokens, int kSpread>
void bf16_panel_spread(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                       float* y, int64_t y_stride) {
  const auto* stored = static_cast<const uint16_t*>(weight.data);
  const int64_t cols = weight.cols, panel_words = bf16_panel_words(cols), first_panel = row_begin / kPanelRows;
  const int64_t n_panels = (row_end + kPanelRows - 1) / kPanelRows - first_panel, part = n_panels / kSpread;
  alignas(64) float sums[kTokens * kSpread * kPanelRows];
  for (int64_t q = 0; q < part; ++q) {
    int64_t panels[kSpread];
    const uint16_t* data[kSpread];
    for (int p = 0; p < kSpread; ++p) {
      panels[p] = first_panel + p * part + q;
      data[p] = stored + panels[p] * panel_words;
    }
    Dots::template dot<kSpread, kTokens>(data, x, x_stride, cols, sums);
    store_panel_sums(sums, kSpread * kPanelRows, panels, kSpread, kTokens, row_begin, row_end, y, y_stride);
  }
  for (int64_t panel = first_panel + kSpread * part; panel < first_panel + n_panels; ++panel) {
    const uint16_t* data[1] = {stored + panel * panel_words};
    Dots::template dot<1, kTokens>(data, x, x_stride, cols, sums);
    store_panel_sums(sums, kPanelRows, &panel, 1, kTokens, row_begin, row_end, y, y_stride);
  }
}

}  // namespace

void store_panel_sums(const float* sums, int64_t token_stride, const int64_t* panels, int n_panels, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int p = 0; p < n_panels; ++p) {
      const int64_t panel_row = panels[p] * kPanelRows;
      const int64_t first = std::max(row_begin, panel_row), end = std::min(row_end, panel_row + kPanelRows);
      const float* from = sums + t * token_stride + p * kPanelRows + first - panel_row;
      float* to = y + t * y_stride + first - row_begin;
      if (end - first == kPanelRows)
        std::memcpy(to, from, sizeof(float) * kPanelRows);
      else
        std::copy(from, from + std::max<int64_t>(0, end - first), to);
    }
}

void bf16_panel_few_token_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                               int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  MLA_CHECK(n_tokens >= 1 && n_tokens <= kBf16PanelFewTokens, "BF16 panels: no few-token kernel for {} tokens",
            n_tokens);
#if defined(__AVX512F__)
  using Kernel = void (*)(const LinearWeight&, int64_t, int64_t, const float*, int64_t, float*, int64_t);
  // 1 token: the AVX2 dot (8 chains over 4 streams); 2-4: one vector a panel and token over 4
  // streams (8-16 chains); 5-15: panel pairs, which outrun 5 or 6 tokens spread over 4 streams
  // (linear_bench BM_BF16Panels/5632/2048/5; docs/performance.md).
  static constexpr Kernel kSpread[4] = {bf16_panel_spread<YmmDots, 1, 4>, bf16_panel_spread<ZmmDots, 2, 4>,
                                        bf16_panel_spread<ZmmDots, 3, 4>, bf16_panel_spread<ZmmDots, 4, 4>};
  if (n_tokens <= 4) return kSpread[n_tokens - 1](weight, row_begin, row_end, x, x_stride, y, y_stride);
  bf16_panel_pairs(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
#elif defined(__AVX2__) && defined(__FMA__)
  // Two tokens read two streams and three one: 16 ymm registers hold 8 and 6 chains.
  if (n_tokens == 1) return bf16_panel_spread<YmmDots, 1, 4>(weight, row_begin, row_end, x, x_stride, y, y_stride);
  if (n_tokens == 2) return bf16_panel_spread<YmmDots, 2, 2>(weight, row_begin, row_end, x, x_stride, y, y_stride);
  bf16_panel_spread<YmmDots, 3, 1>(weight, row_begin, row_end, x, x_stride, y, y_stride);
#endif
}

}  // namespace MLASERVE_KERNELS_NS
