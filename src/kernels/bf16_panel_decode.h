// A Bf16Panels weight against a few tokens (decode: one sequence, or a small batch): each
// stored panel is streamed once from memory over the whole depth with every token's sums in
// registers, where the packed GEMM would revisit it in column pieces. Memory-bound, so the
// kernels read several panels at once and prefetch ahead (simd::prefetch_stream).
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"

namespace MLASERVE_KERNELS_NS {

// The most tokens bf16_panel_few_token_rows takes: with AVX-512 up to 15, with AVX2 up to 3;
// none without.
#if defined(__AVX512F__)
constexpr int64_t kBf16PanelFewTokens = 15;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int64_t kBf16PanelFewTokens = 3;
#else
constexpr int64_t kBf16PanelFewTokens = 0;
#endif

// A few-token kernel's sums to y: sums[t * token_stride + p * 16 + i] is row i of panel
// panels[p] against token t; each of those rows r inside [row_begin, row_end) goes to
// y[t * y_stride + r - row_begin], a whole panel's 16 as one copy (over a short depth, 64
// columns of absorbed MLA's W_UK, a row at a time took as long as the dots).
void store_panel_sums(const float* sums, int64_t token_stride, const int64_t* panels, int n_panels, int64_t n_tokens,
                      int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

// y[t * y_stride + r - row_begin] = W[r] . x_t for r in [row_begin, row_end) and
// t < n_tokens <= kBf16PanelFewTokens, on the calling thread. Each (row, token) sum runs in the
// packed GEMM's order (FMA chains over pieces of kPackedGemmDepth columns, added in turn), so
// a token gets the same bits alone, in a few tokens or in a GEMM block.
void bf16_panel_few_token_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                               int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace MLASERVE_KERNELS_NS
