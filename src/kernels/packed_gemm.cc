#include "kernels/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/dtype.h"
#include "kernels/dequantize.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

// Loop nest (GotoBLAS): token tiles of kTileTokens, then columns in pieces of kDepth, the
// tile's activations packed once per piece (kTileTokens x kDepth fp32 = 192 KB, L2); then
// panels of kPanelRows weight rows decoded to fp32 and transposed to [depth][16] (16 KB, L1);
// then blocks of up to 6 tokens, whose 6 x 16 outputs stay in 12 registers for the whole piece.
// Each step of the inner loop loads 2 weight vectors and broadcasts 6 activations for 12
// FMAs; nothing in it widens or decodes. With L1-resident panels 6 x 16 reaches the FMA peak;
// 4 x 24 falls short, 3 x 32 and 2 x 48 spill.
constexpr int64_t kDepth = kPackedGemmDepth;
constexpr int64_t kTileTokens = 192;
constexpr int kBlockTokens = 6;
constexpr int kPanelRows = 16;
static_assert(kTileTokens % kBlockTokens == 0, "a tile's blocks fit its buffer");
static_assert(kPanelRows == kBf16PanelRows, "a stored Bf16Panels panel is one kernel panel");

#if defined(__AVX2__) && defined(__FMA__)
// The in-lane part of an 8 x 8 transpose: afterwards column j of the input rows r[i] is, for
// j < 4, low128(r[j]) then low128(r[j + 4]), and for j >= 4, high128(r[j - 4]) then
// high128(r[j]).
void transpose_8x8_lanes(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
}

// out[j * out_stride + i] = r[i][j]: 8 rows of 8 stored as 8 columns.
void store_transposed_8x8(__m256 r[8], float* out, int64_t out_stride) {
  transpose_8x8_lanes(r);
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(out + i * out_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(out + (i + 4) * out_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

// A tile's n_tokens in ceil(n_tokens / 6) blocks of as equal sizes as can be (block i: tokens
// [i * n / blocks, (i + 1) * n / blocks)): a block of t tokens keeps 2t accumulator chains,
// and fewer than 8 leave the FMA pipes waiting on its latency, so 8 tokens run as 4 + 4, not
// 6 + 2 (the 2-token block took as long as a 6-token one).
struct TokenBlocks {
  int64_t n_tokens, count;
  explicit TokenBlocks(int64_t tokens) : n_tokens(tokens), count((tokens + kBlockTokens - 1) / kBlockTokens) {}
  int64_t begin(int64_t block) const { return block * n_tokens / count; }
  int64_t end(int64_t block) const { return (block + 1) * n_tokens / count; }
};

// packed[b * depth * 6 + k * 6 + j] = x[begin(b) + j, k0 + k]: each block's tokens contiguous by
// column in 6 slots, the unused slots zero. 8 columns at a time through a register transpose
// (the scalar loop was ~1/5 of packed_gemm_rows' own samples), each column's 6 values stored
// as 4 + 2.
void pack_tokens(const float* x, int64_t x_stride, const TokenBlocks& blocks, int64_t k0, int64_t depth,
                 float* packed) {
  for (int64_t block = 0; block < blocks.count; ++block) {
    float* out = packed + block * kBlockTokens * depth;
    const int present = int(blocks.end(block) - blocks.begin(block));
    const float* rows = x + blocks.begin(block) * x_stride + k0;
    int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; k + 8 <= depth; k += 8) {
      __m256 r[8];
      for (int t = 0; t < 8; ++t) r[t] = t < present ? _mm256_loadu_ps(rows + t * x_stride + k) : _mm256_setzero_ps();
      transpose_8x8_lanes(r);
      for (int j = 0; j < 4; ++j) {
        float* column = out + (k + j) * kBlockTokens;
        _mm_storeu_ps(column, _mm256_castps256_ps128(r[j]));
        _mm_storel_pi(reinterpret_cast<__m64*>(column + 4), _mm256_castps256_ps128(r[j + 4]));
        column += 4 * kBlockTokens;
        _mm_storeu_ps(column, _mm256_extractf128_ps(r[j], 1));
        _mm_storel_pi(reinterpret_cast<__m64*>(column + 4), _mm256_extractf128_ps(r[j + 4], 1));
      }
    }
#endif
    for (; k < depth; ++k)
      for (int t = 0; t < kBlockTokens; ++t) out[k * kBlockTokens + t] = t < present ? rows[t * x_stride + k] : 0.0f;
  }
}

#if defined(__AVX2__) && defined(__FMA__)
// panel[k * 16 + i] = decode(row + i, k0 + k) for 16 rows and a depth of whole 8s, where
// decode(stored_row, stored_column) gives the 8 weights from that column on as fp32: decoded
// and transposed in registers, with no fp32 row buffer in between.
template <class Decode8>
void pack_panel_in_registers(const LinearWeight& weight, int64_t row, int64_t k0, int64_t depth, float* panel,
                             Decode8 decode) {
  for (int64_t k = 0; k < depth; k += 8)
    for (int i = 0; i < kPanelRows; i += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = decode(weight.row_offset + row + i + j, weight.col_offset + k0 + k);
      store_transposed_8x8(r, panel + k * kPanelRows + i, kPanelRows);
    }
}

// INT4 panels (groups that are not whole 32-column blocks; the others run the integer GEMM,
// gemm_4bit.h) column by column: a vector holds one 32-bit word (8 columns, low
// nibble first) of each of 8 rows, so each of the word's columns is a few vector operations
// giving a panel row directly, with no float transposition (INT4: decoding row-wise and
// transposing 8 x 8 took ~1.5 vector operations a weight, this ~0.6). scale_of(stored_row,
// group) is a row's scale for a group of group_size columns; column(packed, c, scale, offset)
// decodes column c of the 8 words with the 8 rows' scales and -8 x scales. depth: whole
// words; a group changes only at a whole word.
template <class ScaleOf, class Column>
void pack_4bit_panel(const LinearWeight& weight, int64_t row, int64_t k0, int64_t depth, int64_t group_size,
                     ScaleOf scale_of, Column column, float* panel) {
  // Words through memcpy (plain 32-bit loads, no alignment assumed).
  const auto* bytes = static_cast<const uint8_t*>(weight.data);
  const auto word_at = [](const uint8_t* p) {
    int32_t word;
    std::memcpy(&word, p, 4);
    return word;
  };
  const int64_t bytes_per_row = weight.stored_cols / 2, first_col = weight.col_offset + k0;
  for (int half = 0; half < kPanelRows; half += 8) {
    const int64_t first_row = weight.row_offset + row + half;
    const uint8_t* row_bytes[8];
    for (int i = 0; i < 8; ++i) row_bytes[i] = bytes + (first_row + i) * bytes_per_row;
    __m256 scale = _mm256_setzero_ps(), offset = scale;
    int64_t group_end = first_col;  // the first word loads its group's scales
    for (int64_t k = 0; k < depth; k += 8) {
      const int64_t col = first_col + k;
      if (col == group_end) {
        const int64_t group = col / group_size;
        group_end = (group + 1) * group_size;
        float scales[8];
        for (int i = 0; i < 8; ++i) scales[i] = scale_of(first_row + i, group);
        scale = _mm256_loadu_ps(scales);
        offset = _mm256_mul_ps(scale, _mm256_set1_ps(-8.0f));
      }
      const int64_t at = col / 2;
      const __m256i packed =
          _mm256_setr_epi32(word_at(row_bytes[0] + at), word_at(row_bytes[1] + at), word_at(row_bytes[2] + at),
                            word_at(row_bytes[3] + at), word_at(row_bytes[4] + at), word_at(row_bytes[5] + at),
                            word_at(row_bytes[6] + at), word_at(row_bytes[7] + at));
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        _mm256_store_ps(panel + (k + c) * kPanelRows + half, column(packed, c, scale, offset));
    }
  }
}

// INT4 through the same lane decoder as its row dequantisation (simd.h).
void pack_int4_panel(const LinearWeight& weight, int64_t row, int64_t k0, int64_t depth, float* panel) {
  const int64_t scales_per_row = weight.stored_cols / weight.group_size;
  pack_4bit_panel(
      weight, row, k0, depth, weight.group_size,
      [&](int64_t stored_row, int64_t group) {
        return bf16_to_f32(weight.group_scale[stored_row * scales_per_row + group]);
      },
      [](__m256i packed, int c, __m256 scale, __m256 offset) {
        return simd::int4_lanes_to_f32(_mm256_srli_epi32(packed, 4 * c), scale, offset);
      },
      panel);
}

// BF16 panels through pack_panel_in_registers (8 weights at a time), INT4 through
// pack_4bit_panel; false for other formats.
bool pack_panel_fast(const LinearWeight& weight, int64_t row, int64_t k0, int64_t depth, float* panel) {
  const int64_t stored_cols = weight.stored_cols;
  if (weight.format == WeightFormat::BF16 && depth % 8 == 0) {
    const auto* values = static_cast<const uint16_t*>(weight.data);
    pack_panel_in_registers(weight, row, k0, depth, panel,
                            [&](int64_t r, int64_t c) { return simd::load_bf16x8(values + r * stored_cols + c); });
    return true;
  }
  if (weight.format == WeightFormat::Int4Group) {  // depth: whole groups
    pack_int4_panel(weight, row, k0, depth, panel);
    return true;
  }
  return false;
}
#endif

// panel[k * 16 + i] = W[row + i, k0 + k] for i < n_rows, zero for the rest of the 16.
void pack_panel(const LinearWeight& weight, int64_t row, int64_t n_rows, int64_t k0, int64_t depth, float* rows,
                float* panel) {
#if defined(__AVX2__) && defined(__FMA__)
  if (n_rows == kPanelRows && pack_panel_fast(weight, row, k0, depth, panel)) return;
#endif
  for (int64_t i = 0; i < kPanelRows; ++i) {
    if (i < n_rows) {
      dequantize_row_range(weight, row + i, k0, k0 + depth, rows + i * kDepth);
    } else {
      std::fill(rows + i * kDepth, rows + i * kDepth + depth, 0.0f);
    }
  }
  int64_t k = 0;
#if defined(__AVX2__) && defined(__FMA__)
  for (; k + 8 <= depth; k += 8)
    for (int i = 0; i < kPanelRows; i += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(rows + (i + j) * kDepth + k);
      store_transposed_8x8(r, panel + k * kPanelRows + i, kPanelRows);
    }
#endif
  for (; k < depth; ++k)
    for (int i = 0; i < kPanelRows; ++i) panel[k * kPanelRows + i] = rows[i * kDepth + k];
}

// The panel source of block_kernel: an fp32 panel [depth][16] (decoded per call), a column at
// a time, or a stored Bf16Panels panel widened in registers a column pair at a time (a shift
// gives column k, a mask column k + 1, for 8 rows: one more vector operation a column beside
// the 12 FMAs, which the block absorbs).
struct Fp32Panel {
  const float* panel;
  static constexpr int kColumns = 1;
#if defined(__AVX2__) && defined(__FMA__)
  void operator()(int64_t k, __m256* rows_0_7, __m256* rows_8_15) const {
    rows_0_7[0] = _mm256_loadu_ps(panel + k * kPanelRows);  // stored panels (fp32_panel_rows) may be unaligned
    rows_8_15[0] = _mm256_loadu_ps(panel + k * kPanelRows + 8);
  }
#endif
  float at(int64_t k, int i) const { return panel[k * kPanelRows + i]; }
};

struct Bf16Panel {
  const uint16_t* panel;  // from an even column
  const uint16_t* next;   // the panel piece run after this one, fetched into L1 meanwhile
  static constexpr int kColumns = 2;
#if defined(__AVX2__) && defined(__FMA__)
  void operator()(int64_t k, __m256* rows_0_7, __m256* rows_8_15) const {
    _mm_prefetch(reinterpret_cast<const char*>(next + bf16_panel_index(0, k)), _MM_HINT_T0);
    simd::load_bf16_pairs(panel + bf16_panel_index(0, k), rows_0_7[0], rows_0_7[1]);
    simd::load_bf16_pairs(panel + bf16_panel_index(8, k), rows_8_15[0], rows_8_15[1]);
  }
#endif
  float at(int64_t k, int i) const { return bf16_to_f32(panel[bf16_panel_index(i, k)]); }
};

// y[t * y_stride + i - first_row] (+)= sum_k tokens[k * 6 + t] * panel row i at k, for kTokens
// tokens and the panel's rows [first_row, end_row) (end_row <= 8 * kVectors); adds to y when
// `accumulate` (a later column piece). Every loop over tokens and vectors is unrolled by
// pragma: GCC otherwise keeps the accumulator array in memory and stores all 12 of them on
// every step of k.
#if defined(__AVX512F__)
// Two stored Bf16Panels panels side by side (32 rows; the second at panel + panel_stride):
// with AVX-512 the packed GEMM runs them together, a panel's column pair one load widened into
// a vector of 16 rows for each column, so kTokens tokens keep 2 x kTokens FMA chains (a panel
// alone gives 6, too few to cover the FMA latency).
struct Bf16PanelPair {
  const uint16_t* panel;
  int64_t panel_stride;
};

// block_kernel for a panel pair: rows [first_row, end_row) of the 32. Each (row, token) sum
// is the same FMA chain as in the AVX2 kernel and the few-token dots, so a token keeps the
// same bits in any batch.
// A pair block's start: the outputs it writes asked for now (see block_kernel), its
// accumulators zeroed.
template <int kTokens>
__attribute__((always_inline)) inline void begin_pair_block(float* y, int64_t y_stride, int first_row, int end_row,
                                                            __m512* acc) {
#pragma GCC unroll 6
  for (int t = 0; t < kTokens; ++t) {
    __builtin_prefetch(y + t * y_stride, 1, 3);
    __builtin_prefetch(y + t * y_stride + end_row - first_row - 1, 1, 3);
  }
#pragma GCC unroll 12
  for (int i = 0; i < 2 * kTokens; ++i) acc[i] = _mm512_setzero_ps();
}

// One column of a pair block: acc[2t] += token t * the first panel's 16 rows, acc[2t + 1] +=
// token t * the second's. tokens: the column's kBlockTokens slots.
template <int kTokens>
__attribute__((always_inline)) inline void pair_block_column(const float* tokens, __m512 first, __m512 second,
                                                             __m512* acc) {
  __asm__("" : "+v"(first), "+v"(second));  // loaded once for the tokens (see simd::dot_4xn)
#pragma GCC unroll 6
  for (int t = 0; t < kTokens; ++t) {
    const __m512 value = _mm512_set1_ps(tokens[t]);
    acc[2 * t] = _mm512_fmadd_ps(value, first, acc[2 * t]);
    acc[2 * t + 1] = _mm512_fmadd_ps(value, second, acc[2 * t + 1]);
  }
}

// y[t * y_stride + i - first_row] (+)= acc[2t] (rows 0-15), acc[2t + 1] (rows 16-31) for the
// pair's rows i in [first_row, end_row).
template <int kTokens>
void store_pair_block(const __m512* acc, float* y, int64_t y_stride, int first_row, int end_row, bool accumulate) {
#pragma GCC unroll 6
  for (int t = 0; t < kTokens; ++t) {
    alignas(64) float rows[2 * kPanelRows];
    _mm512_store_ps(rows, acc[2 * t]);
    _mm512_store_ps(rows + kPanelRows, acc[2 * t + 1]);
    float* token_out = y + t * y_stride;  // row i of the pair at token_out[i - first_row]
    for (int i = first_row; i < end_row; ++i) {
      float& out = token_out[i - first_row];
      out = accumulate ? out + rows[i] : rows[i];
    }
  }
}

template <int kTokens>
void bf16_pair_block_kernel(const float* tokens, Bf16PanelPair pair, int64_t depth, float* y, int64_t y_stride,
                            int first_row, int end_row, bool accumulate) {
  __m512 acc[2 * kTokens];
  begin_pair_block<kTokens>(y, y_stride, first_row, end_row, acc);
  for (int64_t k = 0; k < depth; k += 2) {  // a column pair a step (a lone last column: its first)
    __m512 first[2], second[2];             // [column k, k + 1]
    simd::load_bf16_pairs(pair.panel + k * kPanelRows, first[0], first[1]);
    simd::load_bf16_pairs(pair.panel + pair.panel_stride + k * kPanelRows, second[0], second[1]);
    pair_block_column<kTokens>(tokens + k * kBlockTokens, first[0], second[0], acc);
    if (k + 1 < depth) pair_block_column<kTokens>(tokens + (k + 1) * kBlockTokens, first[1], second[1], acc);
  }
  store_pair_block<kTokens>(acc, y, y_stride, first_row, end_row, accumulate);
}

// Two decoded fp32 panels ([depth][16] each) run together, as Bf16PanelPair: a column is one
// vector of 16 rows from each, 2 x kTokens FMA chains (one 16-row panel, 8-wide, would run at
// half the vector width).
struct Fp32PanelPair {
  const float* first;
  const float* second;
};

// block_kernel for an fp32 panel pair; each (row, token) sum is the AVX2 kernel's FMA chain.
template <int kTokens>
void fp32_pair_block_kernel(const float* tokens, Fp32PanelPair pair, int64_t depth, float* y, int64_t y_stride,
                            int first_row, int end_row, bool accumulate) {
  __m512 acc[2 * kTokens];
  begin_pair_block<kTokens>(y, y_stride, first_row, end_row, acc);
  for (int64_t k = 0; k < depth; ++k)
    pair_block_column<kTokens>(tokens + k * kBlockTokens, _mm512_loadu_ps(pair.first + k * kPanelRows),
                               _mm512_loadu_ps(pair.second + k * kPanelRows), acc);
  store_pair_block<kTokens>(acc, y, y_stride, first_row, end_row, accumulate);
}

// kBlockKernels' counterparts for panel pairs: [tokens - 1].
constexpr void (*kPairBlockKernels[kBlockTokens])(const float*, Bf16PanelPair, int64_t, float*, int64_t, int, int,
                                                  bool) = {
    bf16_pair_block_kernel<1>, bf16_pair_block_kernel<2>, bf16_pair_block_kernel<3>,
    bf16_pair_block_kernel<4>, bf16_pair_block_kernel<5>, bf16_pair_block_kernel<6>,
};
constexpr void (*kFp32PairBlockKernels[kBlockTokens])(const float*, Fp32PanelPair, int64_t, float*, int64_t, int, int,
                                                      bool) = {
    fp32_pair_block_kernel<1>, fp32_pair_block_kernel<2>, fp32_pair_block_kernel<3>,
    fp32_pair_block_kernel<4>, fp32_pair_block_kernel<5>, fp32_pair_block_kernel<6>,
};
#endif

template <int kTokens, int kVectors, class Panel>
void block_kernel(const float* tokens, Panel panel, int64_t depth, float* y, int64_t y_stride, int first_row,
                  int end_row, bool accumulate) {
#if defined(__AVX2__) && defined(__FMA__)
  // The block's outputs were last touched a whole sweep of the thread's rows ago (megabytes:
  // out of L2); asked for now, for writing, they arrive during the depth loop. Without this
  // the final stores stalled on the misses, ~1/6 of the kernel's samples.
#pragma GCC unroll 6
  for (int t = 0; t < kTokens; ++t) {
    __builtin_prefetch(y + t * y_stride, 1, 3);
    __builtin_prefetch(y + t * y_stride + end_row - first_row - 1, 1, 3);
  }
  __m256 acc[kTokens * kVectors];
#pragma GCC unroll 12
  for (auto& a : acc) a = _mm256_setzero_ps();
  simd::broadcast_times_loaded_panel<kTokens, kVectors, Panel::kColumns>(
      [&](int t, int64_t k) { return tokens + k * kBlockTokens + t; }, panel, depth, acc);
  // Whole vectors of rows directly, partial ones through memory (AMD's masked stores are
  // microcoded and slow).
#pragma GCC unroll 2
  for (int v = 0; v < kVectors; ++v) {
    const int lane_begin = std::max(0, first_row - 8 * v), lane_end = std::min(8, end_row - 8 * v);
    if (lane_begin >= lane_end) continue;
#pragma GCC unroll 6
    for (int t = 0; t < kTokens; ++t) {
      float* token_out = y + t * y_stride;  // panel row i at token_out[i - first_row]
      if (lane_begin == 0 && lane_end == 8) {
        float* out = token_out + (8 * v - first_row);
        const __m256 value = acc[t * kVectors + v];
        _mm256_storeu_ps(out, accumulate ? _mm256_add_ps(value, _mm256_loadu_ps(out)) : value);
        continue;
      }
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, acc[t * kVectors + v]);
      for (int i = lane_begin; i < lane_end; ++i) {
        float& out = token_out[8 * v + i - first_row];
        out = accumulate ? out + lanes[i] : lanes[i];
      }
    }
  }
#else
  for (int t = 0; t < kTokens; ++t)
    for (int i = first_row; i < end_row; ++i) {
      float sum = 0.0f;
      for (int64_t k = 0; k < depth; ++k) sum += tokens[k * kBlockTokens + t] * panel.at(k, i);
      float& out = y[t * y_stride + i - first_row];
      out = accumulate ? out + sum : sum;
    }
#endif
}

template <class Panel>
using BlockKernel = void (*)(const float*, Panel, int64_t, float*, int64_t, int, int, bool);

// kBlockKernels<Panel, vectors>[tokens - 1]
template <class Panel, int kVectors>
constexpr BlockKernel<Panel> kBlockKernels[kBlockTokens] = {
    block_kernel<1, kVectors, Panel>, block_kernel<2, kVectors, Panel>, block_kernel<3, kVectors, Panel>,
    block_kernel<4, kVectors, Panel>, block_kernel<5, kVectors, Panel>, block_kernel<6, kVectors, Panel>,
};

template <class Panel>
const BlockKernel<Panel>* block_kernels(Panel, int end_row) {
  return end_row <= 8 ? kBlockKernels<Panel, 1> : kBlockKernels<Panel, 2>;
}
#if defined(__AVX512F__)
inline const auto* block_kernels(Bf16PanelPair, int) { return kPairBlockKernels; }
inline const auto* block_kernels(Fp32PanelPair, int) { return kFp32PairBlockKernels; }
#endif

// The loop nest above for n_tokens tokens against a weight of `cols` columns: token tiles,
// column pieces (the tile's tokens packed once per piece), then for_each_panel(k0, depth,
// run_panel), which calls run_panel(panel, y_column, first_row, end_row) for each panel of
// rows: every block of tokens against it, outputs to column y_column of y.
template <class ForEachPanel>
void gemm_tiles(const float* x, int64_t x_stride, int64_t n_tokens, int64_t cols, float* y, int64_t y_stride,
                ForEachPanel for_each_panel) {
  struct alignas(64) Tokens {
    float values[kTileTokens * kDepth];
  };
  thread_local std::unique_ptr<Tokens> buffer = std::make_unique<Tokens>();
  float* tokens = buffer->values;
  for (int64_t tile = 0; tile < n_tokens; tile += kTileTokens) {
    const int64_t tile_tokens = std::min(kTileTokens, n_tokens - tile);
    for (int64_t k0 = 0; k0 < cols; k0 += kDepth) {
      const int64_t depth = std::min(kDepth, cols - k0);
      const TokenBlocks blocks(tile_tokens);
      pack_tokens(x + tile * x_stride, x_stride, blocks, k0, depth, tokens);
      for_each_panel(k0, depth, [&](auto panel, int64_t y_column, int first_row, int end_row) {
        const auto& kernels = block_kernels(panel, end_row);
        for (int64_t block = 0; block < blocks.count; ++block) {
          const int64_t first = blocks.begin(block), count = blocks.end(block) - first;
          kernels[count - 1](tokens + block * kBlockTokens * depth, panel, depth,
                             y + (tile + first) * y_stride + y_column, y_stride, first_row, end_row, k0 > 0);
        }
      });
    }
  }
}

}  // namespace

void packed_gemm_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride) {
  // 64-byte aligned: a panel step (16 floats) is then one cache line, and no weight load
  // straddles two.
  struct alignas(64) Buffers {
    float rows[kPanelRows * kDepth], panel[kPanelRows * kDepth], second_panel[kPanelRows * kDepth];
  };
  thread_local std::unique_ptr<Buffers> buffers = std::make_unique<Buffers>();
  gemm_tiles(x, x_stride, n_tokens, weight.cols, y, y_stride, [&](int64_t k0, int64_t depth, auto run_panel) {
    int64_t r = row_begin;
#if defined(__AVX512F__)
    for (; r + 2 * kPanelRows <= row_end; r += 2 * kPanelRows) {  // whole pairs of panels
      pack_panel(weight, r, kPanelRows, k0, depth, buffers->rows, buffers->panel);
      pack_panel(weight, r + kPanelRows, kPanelRows, k0, depth, buffers->rows, buffers->second_panel);
      run_panel(Fp32PanelPair{buffers->panel, buffers->second_panel}, r - row_begin, 0, 2 * int(kPanelRows));
    }
#endif
    for (; r < row_end; r += kPanelRows) {
      const int n_rows = int(std::min<int64_t>(kPanelRows, row_end - r));
      pack_panel(weight, r, n_rows, k0, depth, buffers->rows, buffers->panel);
      run_panel(Fp32Panel{buffers->panel}, r - row_begin, 0, n_rows);
    }
  });
}

void fp32_panel_rows(const float* panels, int64_t panel_stride, int64_t rows, int64_t cols, const float* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const int64_t n_panels = (rows + kPanelRows - 1) / kPanelRows;
  gemm_tiles(x, x_stride, n_tokens, cols, y, y_stride, [&](int64_t k0, int64_t, auto run_panel) {
    const auto panel_at = [&](int64_t panel) { return panels + panel * panel_stride + k0 * kPanelRows; };
    const auto rows_of = [&](int64_t panel, int64_t count) {
      return int(std::min<int64_t>(count * kPanelRows, rows - panel * kPanelRows));
    };
    int64_t panel = 0;
#if defined(__AVX512F__)
    for (; panel + 2 <= n_panels; panel += 2)
      run_panel(Fp32PanelPair{panel_at(panel), panel_at(panel + 1)}, panel * kPanelRows, 0, rows_of(panel, 2));
#endif
    for (; panel < n_panels; ++panel) run_panel(Fp32Panel{panel_at(panel)}, panel * kPanelRows, 0, rows_of(panel, 1));
  });
}

void bf16_panel_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* stored = static_cast<const uint16_t*>(weight.data);
  const int64_t cols = weight.cols, panel_words = bf16_panel_words(cols);
  const auto piece = [&](int64_t panel, int64_t k0) { return stored + panel * panel_words + k0 * kPanelRows; };
  const int64_t first_panel = row_begin / kPanelRows;
  gemm_tiles(x, x_stride, n_tokens, cols, y, y_stride, [&](int64_t k0, int64_t depth, auto run_panel) {
    int64_t panel = first_panel;
#if defined(__AVX512F__)
    for (; (panel + 2) * kPanelRows <= row_end; panel += 2) {  // whole pairs (the first may start before row_begin)
      const int64_t first = panel * kPanelRows;
      run_panel(Bf16PanelPair{piece(panel, k0), panel_words}, std::max(first, row_begin) - row_begin,
                int(std::max<int64_t>(0, row_begin - first)), 2 * int(kPanelRows));
    }
#endif
    for (; panel * kPanelRows < row_end; ++panel) {
      const int64_t first = panel * kPanelRows;
      // Prefetched while this piece runs: the next panel's piece, or after the rows' last panel
      // the first one's next piece (this piece again after the last). The stored panels are
      // 64 KB apart at 2048 columns: without it the first block of tokens waits on memory.
      const uint16_t* next = (panel + 1) * kPanelRows < row_end ? piece(panel + 1, k0)
                             : k0 + depth < cols                ? piece(first_panel, k0 + depth)
                                                                : piece(panel, k0);
      run_panel(Bf16Panel{piece(panel, k0), next}, std::max(first, row_begin) - row_begin,
                int(std::max<int64_t>(0, row_begin - first)), int(std::min<int64_t>(kPanelRows, row_end - first)));
    }
  });
}

}  // namespace MLASERVE_KERNELS_NS
