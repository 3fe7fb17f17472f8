#include "kernels/amx_gemm.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {

#ifdef MLA_AMX
namespace {
constexpr int64_t kStepCols = kAmxStepCols;  // columns one tile product consumes
using amx::kTileRows, amx::load_tile_config, amx::NextTilesPrefetch, amx::spread_prefetch, amx::TileConfig;

constexpr int64_t kStepWords = kTileRows * kStepCols;  // bf16 words in an A or B tile
constexpr int64_t kGroupTokens = 128;                  // tokens split into terms at once, over a chunk of columns
constexpr int64_t kChunkTermsBytes =
    1536 * 1024;  // a chunk's split activations (L2): 128 tokens x 2048 columns x 3 terms
static_assert(kTileRows == kBf16PanelRows && kStepCols == kBf16PanelStepCols, "a stored panel's steps are B tiles");

// Linux's request for permission to use an extended state component, and AMX's tile data
// component (asm/prctl.h ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
constexpr int kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;

// (The zero-masked forms with every lane on: GCC 12's plain ones take an undefined source and
// warn from inside its headers.)
__m512 bf16_to_f32x16(__m256bh values) {
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, __m256i(values)), 16));
}

// The group's first `terms` (1-3) bf16 terms of its activations, x = hi + mid + lo, each the
// round-to-nearest-even bf16 of what the terms before it left, laid out as A tiles:
// [term][block][step][16][32] for blocks of 16 tokens and steps of 32 columns (each tile 1 KB
// contiguous: rows of a plain [token][col] array would lie 4 KB apart and fall in one L1 set).
// Zero past `cols` (a padding token's row only reaches its own outputs, which are never read,
// so the rows past `tokens` keep what they held); a non-finite x is carried by hi alone
// (inf - inf would make the others NaN). Returns the terms the group needs: 1 when every x is
// a bf16 value (the latents of a bf16 cache, expanded through kv_b_proj), whose mid and lo are
// zero and add nothing to any sum, else `terms`.
int split_activations(const float* x, int64_t x_stride, int64_t tokens, int64_t blocks, int64_t cols, int64_t steps,
                      int terms, uint16_t* out) {
  const int64_t term_words = blocks * steps * kStepWords;
  if (cols % kStepCols != 0) std::memset(out, 0, size_t(terms * term_words) * 2);
  __m512i rests = _mm512_setzero_si512();  // or of every mid's bits: zero when all x are bf16
  uint16_t rest_bits = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = x + t * x_stride;
    uint16_t* first = out + (t / kTileRows) * steps * kStepWords + (t % kTileRows) * kStepCols;
    auto at = [&](int term, int64_t c) {
      return first + term * term_words + (c / kStepCols) * kStepWords + c % kStepCols;
    };
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
      const __m512 v = _mm512_loadu_ps(row + c);
      const __m256bh h = _mm512_cvtneps_pbh(v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(0, c)), __m256i(h));
      if (terms == 1) continue;
      const __m512 magnitude =
          _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
      const __mmask16 finite = _mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(INFINITY), _CMP_LT_OQ);
      const __m512 rest = _mm512_maskz_sub_ps(finite, v, bf16_to_f32x16(h));
      const __m256bh m = _mm512_cvtneps_pbh(rest);
      rests = _mm512_or_si512(rests, _mm512_castsi256_si512(__m256i(m)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(1, c)), __m256i(m));
      if (terms == 3)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at(2, c)),
                            __m256i(_mm512_cvtneps_pbh(_mm512_sub_ps(rest, bf16_to_f32x16(m)))));
    }
    for (; c < cols; ++c) {
      const uint16_t hi = f32_to_bf16(row[c]);
      *at(0, c) = hi;
      if (terms == 1) continue;
      const float rest = std::isfinite(row[c]) ? row[c] - bf16_to_f32(hi) : 0.0f;
      const uint16_t mid = f32_to_bf16(rest);
      rest_bits |= mid;
      *at(1, c) = mid;
      if (terms == 3) *at(2, c) = f32_to_bf16(rest - bf16_to_f32(mid));
    }
  }
  return rest_bits == 0 && _mm512_test_epi64_mask(rests, rests) == 0 ? 1 : terms;
}

// Steps of 32 columns a scale segment spans: FP8 and grouped INT8 a scale block's columns, else
// (no block scales, or one block) the whole row.
int64_t segment_steps(const LinearWeight& weight, int64_t steps) {
  return is_block_scaled(weight.format) && !weight.one_scale_block() ? weight.block_cols / kStepCols : steps;
}

// What a row-major weight's B tiles are built from: bf16 words or one-byte codes.
enum class TileSource { Bf16, Fp8, Int8 };

// The bf16 words of FP8 E4M3 codes 0-127 as value / 2^8 (exact: 4 exponent and 3 mantissa bits
// fit bf16's 8 and 7, subnormals included; the scales carry the 2^8), four vectors of 32.
struct Fp8Magnitudes {
  __m512i words[4];
  Fp8Magnitudes() {
    alignas(64) uint16_t table[128];
    for (int code = 0; code < 128; ++code) table[code] = f32_to_bf16(fp8_e4m3_table()[code] / 256.0f);
    for (int part = 0; part < 4; ++part) words[part] = _mm512_load_si512(table + 32 * part);
  }
};

// One row's 32 columns from `row` as bf16 words, zero from column `valid` on (masked loads: no
// read past the row's end). INT8 through fp32 (exact); FP8 looked up by the code's 7 magnitude
// bits (two 64-word permutes, picked by bit 6) with the code's sign put back.
template <TileSource kSource>
__m512i step_words(const uint8_t* row, int64_t valid, const Fp8Magnitudes& fp8) {
  const __mmask32 live = valid >= kStepCols ? ~__mmask32(0) : (__mmask32(1) << valid) - 1;
  if constexpr (kSource == TileSource::Bf16) return _mm512_maskz_loadu_epi16(live, row);
  const __m256i bytes = _mm256_maskz_loadu_epi8(live, row);
  if constexpr (kSource == TileSource::Int8) {
    const __m512i first = _mm512_maskz_cvtepi8_epi32(0xffff, _mm256_castsi256_si128(bytes));
    const __m512i second = _mm512_maskz_cvtepi8_epi32(0xffff, _mm256_extracti128_si256(bytes, 1));
    return __m512i(
        _mm512_cvtne2ps_pbh(_mm512_maskz_cvtepi32_ps(0xffff, second), _mm512_maskz_cvtepi32_ps(0xffff, first)));
  } else {
    const __m512i codes = _mm512_maskz_cvtepi8_epi16(~__mmask32(0), bytes);  // sign-extended
    const __m512i low = _mm512_permutex2var_epi16(fp8.words[0], codes, fp8.words[1]);
    const __m512i high = _mm512_permutex2var_epi16(fp8.words[2], codes, fp8.words[3]);
    const __m512i magnitude =
        _mm512_mask_blend_epi16(_mm512_test_epi16_mask(codes, _mm512_set1_epi16(0x40)), low, high);
    return _mm512_ternarylogic_epi32(magnitude, codes, _mm512_set1_epi16(int16_t(0x8000)), 0xf8);  // a | (b & c)
  }
}

// `steps` B tiles from the 16 rows at `rows` (element bytes a column): each row's 32 columns of a
// step as bf16 words, transposed so that tile row p holds columns 2p and 2p + 1 of every row.
template <TileSource kSource>
void build_tiles(const uint8_t* const rows[], int64_t element, int64_t cols, int64_t steps, uint16_t* out) {
  static const Fp8Magnitudes fp8;
  for (int64_t s = 0; s < steps; ++s) {
    __m512i words[kTileRows];
#pragma GCC unroll 16
    for (int n = 0; n < kTileRows; ++n)
      words[n] = step_words<kSource>(rows[n] + s * kStepCols * element, cols - s * kStepCols, fp8);
    simd::transpose_16x16(words);
#pragma GCC unroll 16
    for (int p = 0; p < kTileRows; ++p) _mm512_storeu_si512(out + (s * kTileRows + p) * 2 * kTileRows, words[p]);
  }
}

// Rows [first_row, first_row + 16) of a row-major BF16, INT8 or FP8 weight as B tiles, `steps`
// of them: row p of tile s holds columns 32s + 2p and 32s + 2p + 1 of each of the 16 weight
// rows ([pair][row][2], AMX's layout for the second operand, as Bf16Panels stores a panel),
// zero past `cols`. Rows past the weight's last repeat it (their outputs are never copied out).
// scales[segment][row]: the factor of each row's sum over a segment (INT8: its channel scale;
// FP8: its block's scale times 2^8; BF16: 1).
void row_major_tiles(const LinearWeight& weight, int64_t first_row, int64_t steps, uint16_t* out, float* scales) {
  const bool fp8 = weight.format == WeightFormat::Fp8Block, byte_codes = is_block_scaled(weight.format);
  const int64_t element = byte_codes ? 1 : 2;
  const int64_t stored_blocks = byte_codes ? (weight.stored_cols + weight.block_cols - 1) / weight.block_cols : 0;
  const int64_t per_segment = segment_steps(weight, steps), segments = (steps + per_segment - 1) / per_segment;
  const uint8_t* rows[kTileRows];
  for (int64_t n = 0; n < kTileRows; ++n) {
    const int64_t stored_row = weight.row_offset + std::min(first_row + n, weight.rows - 1);
    rows[n] =
        static_cast<const uint8_t*>(weight.data) + (stored_row * weight.stored_cols + weight.col_offset) * element;
    // Segments past the first start on successive blocks (segment_steps), so segment s uses the
    // view's first block + s.
    const float* row_scales = byte_codes ? weight.block_scale + stored_row / weight.block_rows * stored_blocks +
                                               weight.col_offset / weight.block_cols
                                         : nullptr;
    for (int64_t segment = 0; segment < segments; ++segment)
      scales[segment * kTileRows + n] = byte_codes ? row_scales[segment] * (fp8 ? 256.0f : 1.0f) : 1.0f;
  }
  if (!byte_codes)
    build_tiles<TileSource::Bf16>(rows, element, weight.cols, steps, out);
  else if (fp8)
    build_tiles<TileSource::Fp8>(rows, element, weight.cols, steps, out);
  else
    build_tiles<TileSource::Int8>(rows, element, weight.cols, steps, out);
}

// The stored panels of rows [next_row, next_row + 32) that lie before row_end, their steps
// [first_step, first_step + steps), over `tile_steps`.
NextTilesPrefetch next_pair_prefetch(const LinearWeight& weight, int64_t first_step, int64_t steps, int64_t next_row,
                                     int64_t row_end, int64_t tile_steps) {
  if (next_row >= row_end) return {};
  const int64_t panels = std::min<int64_t>(2, (row_end - next_row + kTileRows - 1) / kTileRows);
  const int64_t panel_bytes = bf16_panel_words(weight.cols) * 2;
  const char* first =
      static_cast<const char*>(weight.data) + next_row / kTileRows * panel_bytes + first_step * kStepWords * 2;
  return spread_prefetch(first, steps * kStepWords * 2, panel_bytes, panels, tile_steps);
}

// A row-major weight's bytes of rows [next_row, next_row + 32) before row_end (the next pair's
// tiles are built from them), over `tile_steps`.
NextTilesPrefetch next_row_major_prefetch(const LinearWeight& weight, int64_t next_row, int64_t row_end,
                                          int64_t tile_steps) {
  if (next_row >= row_end) return {};
  const int64_t element = is_block_scaled(weight.format) ? 1 : 2;
  const char* first = static_cast<const char*>(weight.data) +
                      ((weight.row_offset + next_row) * weight.stored_cols + weight.col_offset) * element;
  const int64_t rows = std::min(2 * kTileRows, row_end - next_row);
  return spread_prefetch(first, weight.cols * element, weight.stored_cols * element, rows, tile_steps);
}

// Tiles: C[block][panel] is tile 2 * block + panel (0-3), A[block] 4 + block, B[panel] 6 + panel;
// every tile 16 rows of 64 bytes (amx_configure_tiles, per thread).
// C[block][panel] (16 tokens x 16 rows, fp32) = sum over `steps` of the first `terms` terms' A tiles
// (a: block 0's first tile; blocks a_block_words apart, terms term_words apart) times the
// panels' B tiles (b: panel 0's first; panels b_panel_words apart); stored to c as
// [block][panel][16][16].
template <int kBlocks, int kPanels>
void tile_products(const uint16_t* a, int64_t a_block_words, int64_t term_words, int terms, const uint16_t* b,
                   int64_t b_panel_words, int64_t steps, NextTilesPrefetch& prefetch, float* c) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    prefetch.step();
    _tile_loadd(6, b + s * kStepWords, 64);
    if constexpr (kPanels == 2) _tile_loadd(7, b + b_panel_words + s * kStepWords, 64);
    for (int term = 0; term < terms; ++term) {
      const uint16_t* at = a + term * term_words + s * kStepWords;
      _tile_loadd(4, at, 64);
      if constexpr (kBlocks == 2) _tile_loadd(5, at + a_block_words, 64);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (kPanels == 2) _tile_dpbf16ps(1, 4, 7);
      if constexpr (kBlocks == 2) _tile_dpbf16ps(2, 5, 6);
      if constexpr (kBlocks == 2 && kPanels == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr int64_t kTileFloats = kTileRows * kTileRows;
  _tile_stored(0, c, 64);
  if constexpr (kPanels == 2) _tile_stored(1, c + kTileFloats, 64);
  if constexpr (kBlocks == 2) _tile_stored(2, c + kPanels * kTileFloats, 64);
  if constexpr (kBlocks == 2 && kPanels == 2) _tile_stored(3, c + 3 * kTileFloats, 64);
}

struct Buffers {
  std::vector<uint16_t> terms, tiles;
  std::vector<float> scales;  // [panel][segment][row]
  alignas(64) float products[4 * kTileRows * kTileRows];
  alignas(64) float sums[4 * kTileRows * kTileRows];
};

// sums (+)= c * scales row by row for one 16 x 16 tile: scales[r] for output row r.
void scale_tile(const float* c, const float* scales, bool first_segment, float* sums) {
  const __m512 scale = _mm512_loadu_ps(scales);
  for (int64_t i = 0; i < kTileRows; ++i) {
    const __m512 product = _mm512_load_ps(c + i * kTileRows);
    _mm512_store_ps(sums + i * kTileRows, first_segment
                                              ? _mm512_mul_ps(product, scale)
                                              : _mm512_fmadd_ps(product, scale, _mm512_load_ps(sums + i * kTileRows)));
  }
}

// A token group's products over one chunk of columns: steps [first_step, first_step + steps) of
// the weight's (`cols` columns: the last chunk may end inside its last step), with the group's
// `tokens` activations split into `terms` over those columns.
struct ColumnChunk {
  int64_t first_step, steps, cols, tokens;
  int terms;

  int64_t token_blocks() const { return (tokens + kTileRows - 1) / kTileRows; }
};

// Steps a column chunk spans at most: a whole group's split activations of a chunk (terms x 8
// blocks x steps tiles of 1 KB) stay in L2 while every row pair's tiles use them (read from L3
// instead, BF16 panels of 2048 x 7168 ran at 512 tokens half as fast as 5632 x 2048). Chunks
// are balanced and hold whole scale segments; they do not depend on the token count, so that a
// token's sums are added in the same order in any batch.
int64_t chunk_steps(const LinearWeight& weight, int64_t steps, int terms) {
  const int64_t group_blocks = kGroupTokens / kTileRows;
  const int64_t most = std::max<int64_t>(1, kChunkTermsBytes / (terms * group_blocks * kStepWords * 2));
  const int64_t chunks = (steps + most - 1) / most, per_segment = segment_steps(weight, steps);
  const int64_t align = per_segment < steps ? per_segment : 1;
  return ((steps + chunks - 1) / chunks + align - 1) / align * align;
}

// A row-major weight's columns of a chunk, as a view of it (chunks start on scale blocks).
LinearWeight column_view(const LinearWeight& weight, const ColumnChunk& chunk) {
  LinearWeight view = weight;
  view.col_offset += chunk.first_step * kStepCols;
  view.cols = chunk.cols;
  return view;
}

// `rows` of a tile's sums (16 tokens x 16 rows: token block first_token / 16 of the group) into
// y, the group's first token's row, or added to it (a chunk after the first).
void store_sums(const float* sums, int64_t rows, int64_t first_token, int64_t tokens, bool add, float* y,
                int64_t y_stride) {
  for (int64_t i = 0; i < kTileRows && first_token + i < tokens; ++i) {
    float* out = y + (first_token + i) * y_stride;
    const float* in = sums + i * kTileRows;
    if (!add)
      std::memcpy(out, in, size_t(rows) * sizeof(float));
    else
      for (int64_t r = 0; r < rows; ++r) out[r] += in[r];
  }
}

// One chunk's products for rows [row_begin, row_end) into y (the group's first token's row;
// column 0 is row_begin), added to what earlier chunks left there.
void chunk_products(const LinearWeight& weight, const ColumnChunk& chunk, int64_t row_begin, int64_t row_end, float* y,
                    int64_t y_stride, Buffers& buffers) {
  const bool stored_panels = weight.format == WeightFormat::Bf16Panels;
  const LinearWeight view = stored_panels ? weight : column_view(weight, chunk);
  const auto* stored = static_cast<const uint16_t*>(weight.data) + chunk.first_step * kStepWords;
  // A chunk's tiles of a token block or built panel; stored panels lie whole panels apart.
  const int64_t chunk_words = chunk.steps * kStepWords, term_words = chunk.token_blocks() * chunk_words;
  const int64_t b_panel_words = stored_panels ? bf16_panel_words(weight.cols) : chunk_words;
  // FP8 and grouped INT8: one scale a block of columns, applied to each block's sums (segments).
  const int64_t per_segment = segment_steps(view, chunk.steps),
                segments = (chunk.steps + per_segment - 1) / per_segment;
  // Stored panels start on multiples of 16 rows (the first may begin before row_begin).
  const int64_t first = stored_panels ? row_begin / kBf16PanelRows * kBf16PanelRows : row_begin;
  buffers.tiles.resize(size_t(2 * chunk_words));
  buffers.scales.resize(size_t(2 * segments * kTileRows));
  for (int64_t pair_row = first; pair_row < row_end; pair_row += 2 * kTileRows) {
    const int panels = pair_row + kTileRows < row_end ? 2 : 1;
    // Stored panels are B tiles as they lie (linear_weight.h), with no scales; other formats
    // are built into buffers.tiles.
    const uint16_t* b_tiles = stored_panels ? stored + pair_row / kTileRows * b_panel_words : buffers.tiles.data();
    for (int p = 0; p < panels; ++p) {
      float* scales = buffers.scales.data() + p * segments * kTileRows;
      if (stored_panels)
        std::fill(scales, scales + kTileRows, 1.0f);
      else
        row_major_tiles(view, pair_row + p * kTileRows, chunk.steps, buffers.tiles.data() + p * chunk_words, scales);
    }
    const int64_t next_row = pair_row + 2 * kTileRows, tile_steps = chunk.steps * ((chunk.token_blocks() + 1) / 2);
    NextTilesPrefetch prefetch =
        stored_panels ? next_pair_prefetch(weight, chunk.first_step, chunk.steps, next_row, row_end, tile_steps)
                      : next_row_major_prefetch(view, next_row, row_end, tile_steps);
    for (int64_t block = 0; block < chunk.token_blocks(); block += 2) {
      const int blocks = block + 1 < chunk.token_blocks() ? 2 : 1;
      for (int64_t segment = 0; segment < segments; ++segment) {
        const int64_t s0 = segment * per_segment, n = std::min(per_segment, chunk.steps - s0);
        const uint16_t* a = buffers.terms.data() + block * chunk_words + s0 * kStepWords;
        const auto products = blocks == 2 ? (panels == 2 ? tile_products<2, 2> : tile_products<2, 1>)
                                          : (panels == 2 ? tile_products<1, 2> : tile_products<1, 1>);
        products(a, chunk_words, term_words, chunk.terms, b_tiles + s0 * kStepWords, b_panel_words, n, prefetch,
                 buffers.products);
        for (int tile = 0; tile < blocks * panels; ++tile)
          scale_tile(buffers.products + tile * kTileRows * kTileRows,
                     buffers.scales.data() + ((tile % panels) * segments + segment) * kTileRows, segment == 0,
                     buffers.sums + tile * kTileRows * kTileRows);
      }
      for (int bl = 0; bl < blocks; ++bl)
        for (int p = 0; p < panels; ++p) {
          const int64_t first_row = pair_row + p * kTileRows;
          const int64_t r0 = std::max(first_row, row_begin), r1 = std::min(first_row + kTileRows, row_end);
          store_sums(buffers.sums + (bl * panels + p) * kTileRows * kTileRows + (r0 - first_row), r1 - r0,
                     (block + bl) * kTileRows, chunk.tokens, chunk.first_step > 0, y + (r0 - row_begin), y_stride);
        }
    }
  }
}

}  // namespace

namespace amx {

// GCC 12's builtin does not tell the optimiser that it reads the 64 bytes: compiled out of line,
// amx_configure_tiles lost its rows and widths as dead stores (an invalid configuration: #GP,
// SIGSEGV). The empty asm reads them first.
void load_tile_config(const TileConfig& config) {
  __asm__ volatile("" : : "m"(config) : "memory");
  _tile_loadconfig(&config);
}

NextTilesPrefetch spread_prefetch(const char* first, int64_t row_bytes, int64_t row_stride, int64_t rows,
                                  int64_t tile_steps) {
  tile_steps = std::max<int64_t>(1, tile_steps);
  return {first, row_bytes, row_stride, rows, 0, (rows * row_bytes / 64 + tile_steps - 1) / tile_steps};
}

}  // namespace amx

void amx_configure_tiles() {
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.rows[tile] = kTileRows;
    config.bytes_per_row[tile] = 64;
  }
  load_tile_config(config);
}

bool amx_built() { return true; }

bool amx_available() {
  static const bool granted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return granted;
}

void linear_rows_amx(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride, int activation_terms) {
  MLA_CHECK(amx_available() && amx_supports(weight), "AMX GEMM: needs AMX and a weight amx_supports ({})",
            weight_format_name(weight.format));
  thread_local Buffers buffers;
  const int64_t steps = (weight.cols + kStepCols - 1) / kStepCols;
  MLA_CHECK(activation_terms >= 1 && activation_terms <= 3, "AMX GEMM: {} bf16 terms (1-3)", activation_terms);
  const int64_t most_steps = chunk_steps(weight, steps, activation_terms);
  amx_configure_tiles();
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kGroupTokens) {
    const int64_t tokens = std::min(kGroupTokens, n_tokens - t0), token_blocks = (tokens + kTileRows - 1) / kTileRows;
    for (ColumnChunk chunk{0, 0, 0, tokens, 0}; chunk.first_step < steps; chunk.first_step += most_steps) {
      chunk.steps = std::min(most_steps, steps - chunk.first_step);
      const int64_t first_col = chunk.first_step * kStepCols;
      chunk.cols = std::min(weight.cols - first_col, chunk.steps * kStepCols);
      buffers.terms.resize(size_t(activation_terms * token_blocks * chunk.steps * kStepWords));
      chunk.terms = split_activations(x + t0 * x_stride + first_col, x_stride, tokens, token_blocks, chunk.cols,
                                      chunk.steps, activation_terms, buffers.terms.data());
      chunk_products(weight, chunk, row_begin, row_end, y + t0 * y_stride, y_stride, buffers);
    }
  }
  _tile_release();
}

#else

bool amx_built() { return false; }
bool amx_available() { return false; }

void linear_rows_amx(const LinearWeight&, int64_t, int64_t, const float*, int64_t, int64_t, float*, int64_t, int) {
  fail("AMX GEMM: this build has no AMX (the avx512 build has it)");
}

#endif

}  // namespace MLASERVE_KERNELS_NS
