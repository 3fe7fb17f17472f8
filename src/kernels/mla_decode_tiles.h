// The absorbed MLA decode's tile kernels (mla_decode.cc's blocked path): for a block of B
// heads of one query, scores against a tile of kTile cached rows and the weighted sums of
// those rows, in fp32, in bf16 products (AVX512_BF16) and on AMX. Internal to src/kernels.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "kernels/amx_gemm.h"
#include "kernels/isa_namespace.h"
#include "kernels/mla_decode.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS::mla_tiles {

// Cached row `position` as fp32: in place for an fp32 cache, else widened into `buffer`.
inline const float* row_f32(const MlaAbsorbedParams& p, int64_t position, float* buffer) {
  if (p.cache.dtype == CacheDType::F32) return p.cache.f32_row(p.layer, position);
  if (p.cache.dtype == CacheDType::BF16) {
    simd::widen_bf16(p.cache.bf16_row(p.layer, position), buffer, p.kv_lora_rank + p.qk_rope_head_dim);
    return buffer;
  }
  const uint8_t* row = p.cache.row(p.layer, position);
  const uint8_t* scales = row + p.kv_lora_rank;
  for (int64_t block = 0; block < fp8_scale_count(p.kv_lora_rank); ++block) {
    const int64_t first = block * kFp8ScaleBlock;
    float scale;
    std::memcpy(&scale, scales + 4 * block, 4);
    simd::widen_fp8_e4m3(row + first, scale, buffer + first, std::min(kFp8ScaleBlock, p.kv_lora_rank - first));
  }
  simd::widen_bf16(reinterpret_cast<const uint16_t*>(scales + 4 * fp8_scale_count(p.kv_lora_rank)),
                   buffer + p.kv_lora_rank, p.qk_rope_head_dim);
  return buffer;
}

// Scores of a tile first, so a new maximum rescales once per tile. Without AVX-512 the fp32
// kernels widen a bf16 cache's tile into a buffer, 192 rows of 512 + 64 values 442 KB, most of
// a Zen 2 core's 512 KB L2, so they take tiles of 96 rows.
#if defined(__AVX512F__)
inline constexpr int64_t kTile = 192;
#else
inline constexpr int64_t kTile = 96;
#endif

// A thread's share of the bytes the caller reads after the attention (the next weights),
// prefetched a line at a time through the attention's products: the attention computes from
// cache while memory would idle, and what is prefetched is read from cache afterwards. The
// caller's products split the rows of each range evenly over the threads, so thread t of T
// takes the t-th of T equal parts of each range, in order. Default-constructed: nothing.
class ReadNextPrefetch {
 public:
  ReadNextPrefetch() = default;
  ReadNextPrefetch(std::span<const ByteRange> ranges, int64_t thread, int64_t threads) : ranges_(ranges) {
    for (size_t r = 0; r < ranges.size(); ++r) {
      const auto* begin = static_cast<const char*>(ranges[r].begin);
      shares_[r] = {begin + ranges[r].bytes * size_t(thread) / size_t(threads),
                    begin + ranges[r].bytes * size_t(thread + 1) / size_t(threads)};
    }
  }

  void line() {
    if (const char* address = next_line()) _mm_prefetch(address, _MM_HINT_T1);
  }

  // The address line() prefetches next (its share's lines 64 bytes apart, range by range),
  // moving past it; null once the shares are done.
  const char* next_line() {
    while (range_ < ranges_.size() && shares_[range_].first >= shares_[range_].second) ++range_;
    if (range_ == ranges_.size()) return nullptr;
    const char* address = shares_[range_].first;
    shares_[range_].first += 64;
    return address;
  }

  static constexpr size_t kMostRanges = 2;

 private:
  std::span<const ByteRange> ranges_;
  std::pair<const char*, const char*> shares_[kMostRanges];
  size_t range_ = 0;
};

// The cached rows of the next tile, prefetched while the current tile computes: without it a
// tile's rows arrive from memory at the start of its scores while the core waits, and memory
// idles through the tile's products (mla_decode_bench BM_FromMemory against BM_Auto). The
// prefetches are spread through the
// products, a few lines between columns: issued a row group at a time they filled the core's
// miss buffers and stalled it as long as the reads had. Each step also prefetches a line of
// the caller's next reads (ReadNextPrefetch). Default-constructed: nothing.
class NextRowsPrefetch {
 public:
  NextRowsPrefetch() = default;
  NextRowsPrefetch(const MlaAbsorbedParams& p, int64_t first, int64_t n, ReadNextPrefetch& read_next)
      : cache_(&p.cache),
        read_next_(&read_next),
        layer_(p.layer),
        position_(first),
        end_(first + n),
        row_bytes_(p.cache.row_bytes()),
        offset_(row_bytes_),
        lines_(n * ((row_bytes_ + 63) / 64)) {}

  // The caller will call step() `calls` times over the current tile: each prefetches its share.
  void spread_over(int64_t calls) { lines_per_step_ = (lines_ + calls - 1) / std::max<int64_t>(calls, 1); }

  // The next lines of the next tile's rows, in order (nothing once they are all asked for),
  // and one line of the caller's next reads.
  void step() {
    if (read_next_) read_next_->line();
    for (int64_t line = 0; line < lines_per_step_; ++line) {
      const char* address = next_line();
      if (!address) return;
      _mm_prefetch(address, _MM_HINT_T1);
    }
  }

  // The next tile's next line (each row's lines 64 bytes apart from its start, row by row);
  // null once every row is asked for.
  const char* next_line() {
    if (offset_ == row_bytes_) {
      if (position_ == end_) return nullptr;
      row_ = reinterpret_cast<const char*>(cache_->row(layer_, position_++));
      offset_ = 0;
    }
    const char* address = row_ + offset_;
    offset_ = std::min(offset_ + 64, row_bytes_);
    return address;
  }

 private:
  const LatentCacheView* cache_ = nullptr;
  ReadNextPrefetch* read_next_ = nullptr;
  const char* row_ = nullptr;
  int64_t layer_ = 0, position_ = 0, end_ = 0, row_bytes_ = 0, offset_ = 0, lines_ = 0, lines_per_step_ = 0;
};

// The calling thread's storage for the queries of head block `slot` of those it runs together
// (blocked_parts): kept from call to call, so decode allocates nothing once it has grown; a
// deque, so adding a slot leaves the others where they are.
template <class T>
std::vector<T>& query_slot(int slot) {
  thread_local std::deque<std::vector<T>> slots;
  while (int(slots.size()) <= slot) slots.emplace_back();
  return slots[size_t(slot)];
}

// The fp32 tile kernels. Scores are computed rows x heads: the block's queries are stored
// transposed, [width][kPanel] with heads padded by zeros to a whole vector, and each cached
// row's values are broadcast against them (simd::rows_times_panel), so one row load feeds
// every head with no horizontal sums; 6 rows x 16 heads or 12 rows x 8 heads per register
// block. A bf16 cache's rows are widened into a tile buffer first.
template <int B>
class Fp32Tiles {
 public:
  Fp32Tiles(const MlaAbsorbedParams& p, int64_t query, int64_t head0, int slot)
      : p_(p), queries_(query_slot<float>(slot)) {
    const int64_t rank = p.kv_lora_rank, rope = p.qk_rope_head_dim;
    rows_.resize(size_t(kTile * (rank + rope)));
    queries_.assign(size_t((rank + rope) * kPanel), 0.0f);
    for (int h = 0; h < B; ++h) {
      const int64_t item = query * p.n_heads + head0 + h;
      for (int64_t d = 0; d < rank; ++d) queries_[size_t(d * kPanel + h)] = p.q_latent[item * rank + d];
      for (int64_t d = 0; d < rope; ++d) queries_[size_t((rank + d) * kPanel + h)] = p.q_pe[item * rope + d];
    }
  }

  // scores[h][i] = softmax_scale * (q[h] . row(first + i)), i < n; the next tile's rows
  // prefetched meanwhile.
  void score(int64_t first, int64_t n, float scores[B][kTile], NextRowsPrefetch& next) {
    const int64_t width = p_.kv_lora_rank + p_.qk_rope_head_dim;
    for (int64_t i = 0; i < n; ++i) tile_rows_[i] = row_f32(p_, first + i, rows_.data() + i * width);
    next.spread_over((n + kRows - 1) / kRows * ((width + 3) / 4));  // rows_times_panel's steps
    for (int64_t i = 0; i < n; i += kRows) {
      const float* x[kRows];
      for (int j = 0; j < kRows; ++j) x[j] = tile_rows_[std::min<int64_t>(i + j, n - 1)];
      float dots[kRows * kPanel];
      simd::rows_times_panel<kRows, kVectors>(x, queries_.data(), width, dots, [&] { next.step(); });
      for (int64_t j = 0; j < kRows && i + j < n; ++j)
        for (int h = 0; h < B; ++h) scores[h][i + j] = p_.softmax_scale * dots[j * kPanel + h];
    }
  }

  // acc[h][d] += sum_i weights[h][i] * row(first + i)[d], over the rows score() just read.
  void accumulate(float weights[B][kTile], int64_t n, float* acc) {
    const int64_t rank = p_.kv_lora_rank;
    for (int h = 0; h < B; h += 4) {
      const float* four[4] = {weights[h], weights[h + 1], weights[h + 2], weights[h + 3]};
      float* out[4] = {acc + h * rank, acc + (h + 1) * rank, acc + (h + 2) * rank, acc + (h + 3) * rank};
      simd::weighted_rows_4(four, tile_rows_, n, out, rank);
    }
  }

 private:
  static constexpr int kPanel = B < 8 ? 8 : B, kVectors = kPanel / 8, kRows = 12 / kVectors;
  const MlaAbsorbedParams& p_;
  std::vector<float>& queries_;
  const float* tile_rows_[kTile];
  static thread_local std::vector<float> rows_;  // a bf16 cache's tile widened (each block's in turn)
};
template <int B>
thread_local std::vector<float> Fp32Tiles<B>::rows_;

#if defined(__AVX512BF16__)
// A tile's cached rows as bf16, where the bf16 and AMX tile kernels read them: a BF16 cache's
// rows in place, an FP8 cache's widened into the thread's buffer (each code times its
// power-of-two scale is exact in bf16, so the products are those of a BF16 cache holding the
// dequantised values). Staged once a tile for all the head blocks that read it.
struct StagedTile {
  std::vector<uint16_t> buffer;  // [kTile][width] for an FP8 cache
  const uint16_t* rows[kTile];
};
inline StagedTile& staged_tile() {
  thread_local StagedTile tile;
  return tile;
}

inline void widen_fp8_row_to_bf16(const MlaAbsorbedParams& p, const uint8_t* row, uint16_t* out) {
  const int64_t rank = p.kv_lora_rank;  // a multiple of 16 (mla_blocked_bf16_products)
  const uint8_t* scales = row + rank;
  for (int64_t i = 0; i < rank; i += 16) {
    float scale;
    std::memcpy(&scale, scales + 4 * (i / kFp8ScaleBlock), 4);
    const __m512 values =
        simd::fp8_e4m3_times(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)), _mm512_set1_ps(scale));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), __m256i(_mm512_cvtneps_pbh(values)));
  }
  std::memcpy(out + rank, scales + 4 * fp8_scale_count(rank), size_t(p.qk_rope_head_dim) * 2);
}

inline void stage_bf16_tile(const MlaAbsorbedParams& p, int64_t first, int64_t n) {
  StagedTile& tile = staged_tile();
  if (p.cache.dtype == CacheDType::BF16) {
    for (int64_t i = 0; i < n; ++i) tile.rows[i] = p.cache.bf16_row(p.layer, first + i);
    return;
  }
  const int64_t width = p.kv_lora_rank + p.qk_rope_head_dim;
  tile.buffer.resize(size_t(kTile * width));
  for (int64_t i = 0; i < n; ++i) {
    widen_fp8_row_to_bf16(p, p.cache.row(p.layer, first + i), tile.buffer.data() + i * width);
    tile.rows[i] = tile.buffer.data() + i * width;
  }
}

// The tile kernels for a bf16 cache on hosts with AVX512_BF16: products of bf16 pairs summed
// in fp32 by vdpbf16ps (32 multiply-adds an instruction, twice fp32 FMA's rate), as GPU MLA
// kernels compute. The cached rows are read in place; the queries are rounded to bf16 once
// per part and each tile's softmax weights once per tile, which adds a relative error of up
// to 2^-9 to each product (docs/kernels.md). Scores: 12 cached rows x 16 heads per register
// block, the queries as [width / 2][16] bf16 pairs and each row's pair broadcast. Weighted
// sums: for 16 columns at a time, two rows' values interleaved (vpermt2w) meet each head's
// pair of weights; B accumulators stay in registers while the tile's rows pass.
// Word 2c of vpermt2w's result is column c of the first row, word 2c + 1 column c of the second.
alignas(64) inline constexpr int16_t kInterleaveRows[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,
                                                            37, 6,  38, 7,  39, 8,  40, 9,  41, 10, 42,
                                                            11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

template <int B>
class Bf16Tiles {
 public:
  // The block's queries as [width / 2][16] bf16 pairs: each head's latent and rope parts rounded
  // 16 values a step into one bf16 row (pair k is its word k), then 16 words of the 16 head rows
  // at a time transposed in registers (heads past B are zero). Pair by pair, with scalar or
  // gathered words, this was a fifth of a 64-position call, and each part of a call does it.
  Bf16Tiles(const MlaAbsorbedParams& p, int64_t query, int64_t head0, int slot)
      : p_(p), query_pairs_(query_slot<int32_t>(slot)) {
    const int64_t rank = p.kv_lora_rank, rope = p.qk_rope_head_dim, width = rank + rope, pairs = width / 2;
    thread_local std::vector<uint16_t> rounded;  // [B][width]
    rounded.resize(size_t(B * width));
    for (int h = 0; h < B; ++h) {
      const int64_t item = query * p.n_heads + head0 + h;
      round_to_bf16(p.q_latent + item * rank, rank, rounded.data() + h * width);
      round_to_bf16(p.q_pe + item * rope, rope, rounded.data() + h * width + rank);
    }
    query_pairs_.resize(size_t(pairs * kLanes));
    const auto* words = reinterpret_cast<const int32_t*>(rounded.data());  // head h's pair k: words[h * pairs + k]
    for (int64_t k = 0; k < pairs; k += 16) {
      const __mmask16 lanes = pairs - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (pairs - k)) - 1);
      __m512i block[16];
      for (int h = 0; h < 16; ++h)
        block[h] = h < B ? _mm512_maskz_loadu_epi32(lanes, words + h * pairs + k) : _mm512_setzero_si512();
      simd::transpose_16x16(block);
      for (int64_t j = 0; j < 16 && k + j < pairs; ++j)
        _mm512_storeu_si512(query_pairs_.data() + (k + j) * kLanes, block[j]);
    }
  }

  // The tile's rows are those stage_bf16_tile(p, first, n) staged.
  void score(int64_t n, float scores[B][kTile]) {
    std::copy_n(staged_tile().rows, n, tile_rows_);
    const int64_t pairs = (p_.kv_lora_rank + p_.qk_rope_head_dim) / 2;
    for (int64_t i = 0; i < n; i += kRows) {
      __m512 acc[kRows];
#pragma GCC unroll 12
      for (auto& a : acc) a = _mm512_setzero_ps();
      const uint16_t* rows[kRows];
      for (int j = 0; j < kRows; ++j) rows[j] = tile_rows_[std::min<int64_t>(i + j, n - 1)];
      for (int64_t k = 0; k < pairs; ++k) {
        __m512i queries = _mm512_loadu_si512(query_pairs_.data() + k * kLanes);
        __asm__("" : "+v"(queries));  // loaded once for the 12 rows (see simd::dot_4xn)
#pragma GCC unroll 12
        for (int j = 0; j < kRows; ++j) {
          int32_t row_pair;
          std::memcpy(&row_pair, rows[j] + 2 * k, 4);
          acc[j] = _mm512_dpbf16_ps(acc[j], __m512bh(queries), __m512bh(_mm512_set1_epi32(row_pair)));
        }
      }
      for (int64_t j = 0; j < kRows && i + j < n; ++j) {
        float dots[kLanes];
        _mm512_storeu_ps(dots, acc[j]);
        for (int h = 0; h < B; ++h) scores[h][i + j] = p_.softmax_scale * dots[h];
      }
    }
  }

  void accumulate(float weights[B][kTile], int64_t n, float* acc) {
    const int64_t rank = p_.kv_lora_rank, n_pairs = (n + 1) / 2;
    alignas(64) int32_t weight_pairs[B][kPairSteps * 16];
    for (int h = 0; h < B; ++h) to_bf16_pairs(weights[h], n, weight_pairs[h]);
    const __m512i interleave = _mm512_load_si512(kInterleaveRows);
    for (int64_t d = 0; d < rank; d += 16) {
      __m512 sums[B];
#pragma GCC unroll 16
      for (int h = 0; h < B; ++h) sums[h] = _mm512_loadu_ps(acc + h * rank + d);
      for (int64_t i = 0; i < n_pairs; ++i) {
        const uint16_t* second = tile_rows_[std::min(2 * i + 1, n - 1)];  // weight 0 past the tile
        const __m512i two_rows = _mm512_permutex2var_epi16(
            _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile_rows_[2 * i] + d))),
            interleave, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(second + d))));
#pragma GCC unroll 16
        for (int h = 0; h < B; ++h)
          sums[h] = _mm512_dpbf16_ps(sums[h], __m512bh(two_rows), __m512bh(_mm512_set1_epi32(weight_pairs[h][i])));
      }
#pragma GCC unroll 16
      for (int h = 0; h < B; ++h) _mm512_storeu_ps(acc + h * rank + d, sums[h]);
    }
  }

 protected:
  static constexpr int kLanes = 16, kRows = 12;
  // out[i] = bf16(x[i]), i < n, rounded to nearest even (vcvtneps2bf16; as in to_bf16_pairs, a
  // value under 2^-126 becomes 0).
  static void round_to_bf16(const float* x, int64_t n, uint16_t* out) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 lanes = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
      _mm256_mask_storeu_epi16(out + i, lanes, __m256i(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lanes, x + i))));
    }
  }
  // weights[0, n) (n <= kTile) as bf16 pairs, rounded to nearest even (vcvtne2ps2bf16; a
  // weight under 2^-126 becomes 0), zero past n, in whole steps of 16 pairs: out[0, 16 *
  // ceil(n / 32)). Converted one at a time they were most of the AMX kernel's time.
  static constexpr int64_t kPairSteps = (kTile + 31) / 32;
  static void to_bf16_pairs(const float* weights, int64_t n, int32_t* out) {
    const auto lanes = [](int64_t count) {
      return count >= 16 ? __mmask16(0xFFFF) : count <= 0 ? __mmask16(0) : __mmask16((1u << count) - 1);
    };
    for (int64_t i = 0; i < n; i += 32) {
      const __m512 low = _mm512_maskz_loadu_ps(lanes(n - i), weights + i);
      const __m512 high = _mm512_maskz_loadu_ps(lanes(n - i - 16), weights + i + 16);
      _mm512_storeu_si512(out + i / 2, __m512i(_mm512_cvtne2ps_pbh(high, low)));
    }
  }
  const MlaAbsorbedParams& p_;
  std::vector<int32_t>& query_pairs_;
  const uint16_t* tile_rows_[kTile];
};
#endif

#ifdef MLA_AMX
// The tile kernels on AMX for 16 heads over a bf16 cache (width a multiple of 32): the same
// bf16 products as Bf16Tiles, 16 x 16 x 32 of them an instruction. Scores as [16 positions][16
// heads] tiles: 16 cached rows are an A tile where they lie (one cache block's rows are one
// stride apart; rows across a block boundary, or a tile's last few, are copied first), the
// queries' [width / 2][16] bf16 pairs the B tiles. Weighted sums as [16 heads][16 columns]
// tiles of acc: the weights' bf16 pairs [16 heads][32 positions] the A tile, 32 rows' 16
// columns interleaved in pairs (vpermt2w, as Bf16Tiles) the B tile.
class AmxTiles : public Bf16Tiles<16> {
 public:
  AmxTiles(const MlaAbsorbedParams& p, int64_t query, int64_t head0, int slot) : Bf16Tiles<16>(p, query, head0, slot) {
    amx_configure_tiles();
  }
  ~AmxTiles() { _tile_release(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

  static bool supports(const MlaAbsorbedParams& p) {
    return mla_blocked_bf16_products(p) && (p.kv_lora_rank + p.qk_rope_head_dim) % 32 == 0;
  }

  void score(int64_t n, float scores[16][kTile]) {
    const int64_t width = p_.kv_lora_rank + p_.qk_rope_head_dim;
    std::copy_n(staged_tile().rows, n, tile_rows_);
    alignas(64) float dots[16][16];  // [position][head]
    for (int64_t i = 0; i < n; i += 16) {
      const int64_t rows = std::min<int64_t>(16, n - i);
      const uint16_t* a = tile_rows_[i];
      if (rows < 16 || tile_rows_[i + 15] != a + 15 * width) {
        staged_.resize(size_t(16 * width));
        for (int64_t j = 0; j < 16; ++j)
          std::memcpy(staged_.data() + j * width, tile_rows_[i + std::min(j, rows - 1)], size_t(width) * 2);
        a = staged_.data();
      }
      _tile_zero(0);
      for (int64_t k = 0; k < width; k += 32) {
        _tile_loadd(1, a + k, width * 2);
        _tile_loadd(2, query_pairs_.data() + k / 2 * kLanes, kLanes * 4);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, dots, 64);
      for (int64_t j = 0; j < rows; ++j)
        for (int h = 0; h < 16; ++h) scores[h][i + j] = p_.softmax_scale * dots[j][h];
    }
  }

  void accumulate(float weights[16][kTile], int64_t n, float* acc) {
    const int64_t rank = p_.kv_lora_rank, steps = (n + 31) / 32;
    alignas(64) int32_t weight_pairs[16][kStepPairs * kMaxSteps];  // zero past n
    for (int h = 0; h < 16; ++h) to_bf16_pairs(weights[h], n, weight_pairs[h]);
    const __m512i interleave = _mm512_load_si512(kInterleaveRows);
    alignas(64) int32_t columns[kStepPairs][16];  // B: [position pair][column] bf16 pairs
    for (int64_t d = 0; d < rank; d += 16) {
      _tile_loadd(0, acc + d, rank * 4);
      for (int64_t step = 0; step < steps; ++step) {
        for (int64_t i = 0; i < kStepPairs; ++i) {
          const int64_t row = step * 32 + 2 * i;  // rows past the tile: its last (weight 0)
          const uint16_t* first = tile_rows_[std::min(row, n - 1)];
          const uint16_t* second = tile_rows_[std::min(row + 1, n - 1)];
          _mm512_store_si512(
              columns[i],
              _mm512_permutex2var_epi16(
                  _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(first + d))), interleave,
                  _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(second + d)))));
        }
        _tile_loadd(1, &weight_pairs[0][step * kStepPairs], kStepPairs * kMaxSteps * 4);
        _tile_loadd(2, columns, 64);
        _tile_dpbf16ps(0, 1, 2);
      }
      _tile_stored(0, acc + d, rank * 4);
    }
  }

 private:
  static constexpr int64_t kStepPairs = 16, kMaxSteps = (kTile + 31) / 32;
  static inline thread_local std::vector<uint16_t> staged_;
};
#endif

}  // namespace MLASERVE_KERNELS_NS::mla_tiles
