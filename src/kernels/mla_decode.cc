#include "kernels/mla_decode.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/amx_gemm.h"
#include "kernels/attention.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

std::atomic<MlaDecodeKernel> chosen_kernel{MlaDecodeKernel::Auto};

// Cached row `position` as fp32: in place for an fp32 cache, else widened into `buffer`.
const float* row_f32(const MlaAbsorbedParams& p, int64_t position, float* buffer) {
  if (p.cache.dtype == CacheDType::F32) return p.cache.f32_row(p.layer, position);
  simd::widen_bf16(p.cache.bf16_row(p.layer, position), buffer, p.kv_lora_rank + p.qk_rope_head_dim);
  return buffer;
}

// One block of B heads of one query over positions [begin, end): running max, sum of
// exp(score - max) and the unnormalised sum of exp(score - max) * c, per head.
template <int B>
struct Partial {
  float max[B], sum[B];
  float* acc;  // [B, kv_lora_rank]
};

constexpr int64_t kTile = 192;  // scores of a tile first, so a new maximum rescales once per tile

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

  // scores[h][i] = softmax_scale * (q[h] . row(first + i)), i < n.
  void score(int64_t first, int64_t n, float scores[B][kTile]) {
    const int64_t width = p_.kv_lora_rank + p_.qk_rope_head_dim;
    for (int64_t i = 0; i < n; ++i) tile_rows_[i] = row_f32(p_, first + i, rows_.data() + i * width);
    for (int64_t i = 0; i < n; i += kRows) {
      const float* x[kRows];
      for (int j = 0; j < kRows; ++j) x[j] = tile_rows_[std::min<int64_t>(i + j, n - 1)];
      float dots[kRows * kPanel];
      simd::rows_times_panel<kRows, kVectors>(x, queries_.data(), width, dots);
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
// The tile kernels for a bf16 cache on hosts with AVX512_BF16: products of bf16 pairs summed
// in fp32 by vdpbf16ps (32 multiply-adds an instruction, twice fp32 FMA's rate), as GPU MLA
// kernels compute. The cached rows are read in place; the queries are rounded to bf16 once
// per part and each tile's softmax weights once per tile, which adds a relative error of up
// to 2^-9 to each product (docs/kernels.md). Scores: 12 cached rows x 16 heads per register
// block, the queries as [width / 2][16] bf16 pairs and each row's pair broadcast. Weighted
// sums: for 16 columns at a time, two rows' values interleaved (vpermt2w) meet each head's
// pair of weights; B accumulators stay in registers while the tile's rows pass.
// Word 2c of vpermt2w's result is column c of the first row, word 2c + 1 column c of the second.
alignas(64) constexpr int16_t kInterleaveRows[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                     8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};

template <int B>
class Bf16Tiles {
 public:
  Bf16Tiles(const MlaAbsorbedParams& p, int64_t query, int64_t head0, int slot)
      : p_(p), query_pairs_(query_slot<int32_t>(slot)) {
    const int64_t rank = p.kv_lora_rank, rope = p.qk_rope_head_dim;
    query_pairs_.assign(size_t((rank + rope) / 2 * kLanes), 0);
    for (int h = 0; h < B; ++h) {
      const int64_t item = query * p.n_heads + head0 + h;
      for (int64_t d = 0; d < rank + rope; d += 2) {
        const float low = d < rank ? p.q_latent[item * rank + d] : p.q_pe[item * rope + d - rank];
        const float high = d < rank ? p.q_latent[item * rank + d + 1] : p.q_pe[item * rope + d + 1 - rank];
        query_pairs_[size_t(d / 2 * kLanes + h)] = bf16_pair(low, high);
      }
    }
  }

  void score(int64_t first, int64_t n, float scores[B][kTile]) {
    for (int64_t i = 0; i < n; ++i) tile_rows_[i] = p_.cache.bf16_row(p_.layer, first + i);
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
  static int32_t bf16_pair(float low, float high) {
    return int32_t(uint32_t(f32_to_bf16(low)) | uint32_t(f32_to_bf16(high)) << 16);
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
    return amx_available() && mla_blocked_bf16_products(p) && (p.kv_lora_rank + p.qk_rope_head_dim) % 32 == 0;
  }

  void score(int64_t first, int64_t n, float scores[16][kTile]) {
    const int64_t width = p_.kv_lora_rank + p_.qk_rope_head_dim;
    for (int64_t i = 0; i < n; ++i) tile_rows_[i] = p_.cache.bf16_row(p_.layer, first + i);
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
          _mm512_store_si512(columns[i], _mm512_permutex2var_epi16(
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
  static thread_local std::vector<uint16_t> staged_;
};
thread_local std::vector<uint16_t> AmxTiles::staged_;
#endif

// One unit of blocked work: a block of B heads of one query of one sequence, over part `part`
// of `parts` of its visible positions.
struct BlockedItem {
  const MlaAbsorbedParams* p;
  int64_t query, head0, part, parts;
  int64_t begin() const { return (p->first_position + query + 1) * part / parts; }
  int64_t end() const { return (p->first_position + query + 1) * (part + 1) / parts; }
};

// One tile's scores folded into a block's online softmax: each head's running maximum, the
// sums rescaled when it grows, and the scores turned into weights exp(score - max).
template <int B>
void online_softmax_step(Partial<B>& part, float scores[B][kTile], int64_t n, int64_t rank) {
  for (int h = 0; h < B; ++h) {
    const float tile_max = simd::max_of(scores[h], n);
    if (tile_max > part.max[h]) {
      const float correction = std::exp(part.max[h] - tile_max);  // 0 on the first tile
      part.sum[h] *= correction;
      for (int64_t d = 0; d < rank; ++d) part.acc[h * rank + d] *= correction;
      part.max[h] = tile_max;
    }
    part.sum[h] += simd::exp_shifted(scores[h], n, part.max[h]);  // scores are now weights
  }
}

// Head blocks of one query run together (at most this many: 128 heads).
constexpr int kMostBlocks = 8;

// `count` blocks of B heads of one query over the same positions [begin, end), each its own
// online softmax, a tile of positions at a time for every block before the next tile: the
// tile's cached rows come from memory once for all the blocks (then from L1/L2), where a block
// at a time read the whole cache again for each (DeepSeek-V3's 128 heads on one rank: eight
// times). Each block's sums take the same steps in the same order as alone.
template <int B, class Tiles>
void blocked_parts(const BlockedItem* items, Partial<B>* parts, int count) {
  const MlaAbsorbedParams& p = *items[0].p;
  const int64_t rank = p.kv_lora_rank, begin = items[0].begin(), end = items[0].end();
  std::optional<Tiles> tiles[kMostBlocks];
  for (int b = 0; b < count; ++b) {
    tiles[b].emplace(p, items[b].query, items[b].head0, b);
    std::fill(parts[b].max, parts[b].max + B, -INFINITY);
    std::fill(parts[b].sum, parts[b].sum + B, 0.0f);
    std::fill(parts[b].acc, parts[b].acc + B * rank, 0.0f);
  }
  float scores[B][kTile];
  for (int64_t tile = begin; tile < end; tile += kTile) {
    const int64_t n = std::min(kTile, end - tile);
    for (int b = 0; b < count; ++b) {
      tiles[b]->score(tile, n, scores);
      online_softmax_step<B>(parts[b], scores, n, rank);
      tiles[b]->accumulate(scores, n, parts[b].acc);
    }
  }
}

// The step's (query, head block, part) items in `items`, costs[i] the cost of the items before
// item i (positions plus a fixed 32 an item). Positions split over the threads (flash-decoding)
// when the step has fewer (query, head block) pairs than threads, in parts of at least 64
// positions. Returns how many items a step of these sequences can have at most (a pair splits
// into at most ceil(threads / pairs) parts), reserved here so that splitting once sequences
// grow deeper does not reallocate.
template <int B>
size_t plan_items(std::span<const MlaAbsorbedParams> batch, int64_t threads, std::vector<BlockedItem>& items,
                  std::vector<int64_t>& costs) {
  int64_t pairs = 0;
  for (const auto& p : batch) pairs += p.n_queries * (p.n_heads / B);
  const size_t most_items = size_t(pairs + threads);
  items.clear();
  costs.assign(1, 0);
  items.reserve(most_items);
  costs.reserve(most_items + 1);
  for (const auto& p : batch) {
    MLA_CHECK(p.kv_lora_rank == batch[0].kv_lora_rank && p.n_heads == batch[0].n_heads &&
                  p.cache.dtype == batch[0].cache.dtype,
              "one decode step's MLA shapes or cache dtypes differ");
    const int64_t longest = p.first_position + p.n_queries;
    const int64_t parts = std::clamp<int64_t>(longest / 64, 1, (threads + pairs - 1) / pairs);
    for (int64_t query = 0; query < p.n_queries; ++query)  // a query's blocks of one part side by side
      for (int64_t part = 0; part < parts; ++part)
        for (int64_t head0 = 0; head0 < p.n_heads; head0 += B) {
          items.push_back({&p, query, head0, part, parts});
          costs.push_back(costs.back() + items.back().end() - items.back().begin() + 32);
        }
  }
  return most_items;
}

// Each (query, head block)'s parts merged into its output: each part rescaled to the common
// maximum, then normalised.
// A (query, block)'s parts lie a query's block count apart (plan_items' order).
template <int B>
void merge_parts(const std::vector<BlockedItem>& items, const std::vector<Partial<B>>& partials, int64_t rank) {
  for (size_t first = 0; first < items.size(); ++first) {
    const BlockedItem& item = items[first];
    if (item.part != 0) continue;
    const size_t stride = size_t(item.p->n_heads / B);
    for (int h = 0; h < B; ++h) {
      float max = -INFINITY, sum = 0.0f;
      for (int64_t part = 0; part < item.parts; ++part) max = std::max(max, partials[first + size_t(part) * stride].max[h]);
      float* out = item.p->out_latent + (item.query * item.p->n_heads + item.head0 + h) * rank;
      std::fill(out, out + rank, 0.0f);
      for (int64_t part = 0; part < item.parts; ++part) {
        const Partial<B>& partial = partials[first + size_t(part) * stride];
        if (partial.sum[h] == 0.0f) continue;  // an empty part
        const float scale = std::exp(partial.max[h] - max);
        sum += partial.sum[h] * scale;
        simd::axpy(scale, partial.acc + h * rank, out, rank);
      }
      const float inverse = 1.0f / sum;
      for (int64_t d = 0; d < rank; ++d) out[d] *= inverse;
    }
  }
}

// Every sequence's items of a decode step (plan_items) in one parallel pass, the threads taking
// contiguous shares of their cost: one pass a sequence left the other thread idle (a decoding
// sequence with 16 heads is one item) and cost a dispatch each, 1.3 ms of a 23 ms step of mini
// at batch 8.
template <int B>
void blocked(std::span<const MlaAbsorbedParams> batch) {
  const int64_t rank = batch[0].kv_lora_rank, threads = thread_pool().size();
  // Reused: the decode path allocates nothing. Named through references, which the pool's
  // lambda captures: a thread_local named inside it would be the worker's own (empty) one.
  thread_local std::vector<BlockedItem> item_buffer;
  thread_local std::vector<int64_t> cost_buffer;
  thread_local std::vector<Partial<B>> partial_buffer;
  thread_local std::vector<float> accumulator_buffer;
  std::vector<BlockedItem>& items = item_buffer;
  std::vector<int64_t>& costs = cost_buffer;
  std::vector<Partial<B>>& partials = partial_buffer;
  std::vector<float>& accumulators = accumulator_buffer;
  const size_t most_items = plan_items<B>(batch, threads, items, costs);
  partials.reserve(most_items);
  accumulators.reserve(most_items * size_t(B * rank));
  partials.resize(items.size());
  accumulators.resize(items.size() * size_t(B * rank));
  // The tile kernel, alike for every sequence of the step (one shape, one cache dtype).
  [[maybe_unused]] const bool bf16_products = mla_blocked_bf16_products(batch[0]);  // false without AVX512_BF16
#ifdef MLA_AMX
  const bool amx_tiles = B == 16 && AmxTiles::supports(batch[0]);
#endif
  const auto run_parts = [&](const BlockedItem* first, Partial<B>* parts, int count) {
#ifdef MLA_AMX
    if constexpr (B == 16)
      if (amx_tiles) return blocked_parts<B, AmxTiles>(first, parts, count);
#endif
#if defined(__AVX512BF16__)
    if (bf16_products) return blocked_parts<B, Bf16Tiles<B>>(first, parts, count);
#endif
    blocked_parts<B, Fp32Tiles<B>>(first, parts, count);
  };
  // Neighbouring items of one query and part (its head blocks) run together.
  const auto same_positions = [&](size_t a, size_t b) {
    return items[a].p == items[b].p && items[a].query == items[b].query && items[a].part == items[b].part;
  };
  const int64_t total = costs.back();
  thread_pool().parallel_for(threads, [&](int64_t first_thread, int64_t end_thread, int) {
    // The items whose costs start in [total * first_thread / threads, total * end_thread / threads).
    const auto first = std::lower_bound(costs.begin(), costs.end() - 1, total * first_thread / threads);
    const auto last = std::lower_bound(costs.begin(), costs.end() - 1, total * end_thread / threads);
    const auto end = size_t(last - costs.begin());
    for (auto i = size_t(first - costs.begin()); i < end;) {
      size_t j = i + 1;
      while (j < end && j - i < kMostBlocks && same_positions(i, j)) ++j;
      for (size_t k = i; k < j; ++k) partials[k].acc = accumulators.data() + k * size_t(B * rank);
      run_parts(&items[i], &partials[i], int(j - i));
      i = j;
    }
  });
  merge_parts<B>(items, partials, rank);
}

// Padded: the queries of n_heads heads with zero heads appended up to a supported count; a
// zero query scores 0 everywhere and its output is dropped.
void padded(std::span<const MlaAbsorbedParams> batch) {
  const int64_t n_heads = batch[0].n_heads, heads = mla_padded_heads(n_heads), rank = batch[0].kv_lora_rank;
  const int64_t rope = batch[0].qk_rope_head_dim;
  int64_t n_queries = 0;
  for (const auto& p : batch) n_queries += p.n_queries;
  thread_local std::vector<float> q_latent, q_pe, out;  // reused across calls
  thread_local std::vector<MlaAbsorbedParams> wide;
  q_latent.assign(size_t(n_queries * heads * rank), 0.0f);
  q_pe.assign(size_t(n_queries * heads * rope), 0.0f);
  out.resize(q_latent.size());
  wide.assign(batch.begin(), batch.end());
  for (int64_t first = 0; auto& p : wide) {
    for (int64_t query = 0; query < p.n_queries; ++query) {
      std::memcpy(q_latent.data() + (first + query) * heads * rank, p.q_latent + query * n_heads * rank,
                  size_t(n_heads * rank) * sizeof(float));
      std::memcpy(q_pe.data() + (first + query) * heads * rope, p.q_pe + query * n_heads * rope,
                  size_t(n_heads * rope) * sizeof(float));
    }
    p.q_latent = q_latent.data() + first * heads * rank;
    p.q_pe = q_pe.data() + first * heads * rope;
    p.out_latent = out.data() + first * heads * rank;
    p.n_heads = heads;
    first += p.n_queries;
  }
  mla_absorbed_blocked(wide);
  for (int64_t first = 0; const auto& p : batch) {
    for (int64_t query = 0; query < p.n_queries; ++query)
      std::memcpy(p.out_latent + query * n_heads * rank, out.data() + (first + query) * heads * rank,
                  size_t(n_heads * rank) * sizeof(float));
    first += p.n_queries;
  }
}

}  // namespace

const char* mla_decode_kernel_name(MlaDecodeKernel kernel) {
  switch (kernel) {
    case MlaDecodeKernel::Auto: return "auto";
    case MlaDecodeKernel::Blocked: return "blocked";
    case MlaDecodeKernel::Padded: return "padded";
    case MlaDecodeKernel::Generic: return "generic";
  }
  return "?";
}

MlaDecodeKernel mla_decode_kernel_from_name(const char* name) {
  for (auto kernel : {MlaDecodeKernel::Auto, MlaDecodeKernel::Padded, MlaDecodeKernel::Generic})
    if (std::strcmp(name, mla_decode_kernel_name(kernel)) == 0) return kernel;
  fail("unknown --mla-kernel '{}' (auto, padded, generic)", name);
}

void set_mla_decode_kernel(MlaDecodeKernel kernel) { chosen_kernel = kernel; }
MlaDecodeKernel mla_decode_kernel() { return chosen_kernel; }

bool mla_blocked_supports(int64_t n_heads) { return n_heads == 4 || n_heads == 8 || (n_heads > 0 && n_heads % 16 == 0); }

int64_t mla_padded_heads(int64_t n_heads) {
  for (int64_t heads : {4, 8, 16})
    if (n_heads <= heads) return heads;
  return (n_heads + 15) / 16 * 16;
}

// Cost model, per cached row, in units of one head's dot products over it (~1 row of compute):
// generic reads the row twice per head (score, then accumulate) and computes each head once;
// padded reads it once per block of 16 and computes every padded head. Streaming a row from
// beyond L1 costs about as much as one head's compute on it (576 bf16 values; measured in
// docs/benchmarks.md), so generic costs 3 per head and padded 1 per padded head plus 1 per
// block: 12 heads -> 36 vs 17 (padded); only 1 head (4 padded: 5 vs 3) runs generic.
MlaDecodeKernel mla_decode_plan(int64_t n_heads, MlaDecodeKernel choice) {
  if (mla_blocked_supports(n_heads)) return MlaDecodeKernel::Blocked;
  if (choice == MlaDecodeKernel::Padded || choice == MlaDecodeKernel::Generic) return choice;
  const int64_t padded_heads = mla_padded_heads(n_heads);
  const int64_t padded_cost = padded_heads + (padded_heads + 15) / 16, generic_cost = 3 * n_heads;
  return padded_cost <= generic_cost ? MlaDecodeKernel::Padded : MlaDecodeKernel::Generic;
}

void mla_absorbed_attention(std::span<const MlaAbsorbedParams> batch) {
  if (batch.empty()) return;
  switch (mla_decode_plan(batch[0].n_heads, mla_decode_kernel())) {
    case MlaDecodeKernel::Blocked: return mla_absorbed_blocked(batch);
    case MlaDecodeKernel::Padded: return padded(batch);
    default:
      for (const auto& params : batch) mla_absorbed_generic(params);
  }
}

void mla_absorbed_attention(const MlaAbsorbedParams& params) { mla_absorbed_attention(std::span(&params, 1)); }

bool mla_blocked_bf16_products(const MlaAbsorbedParams& params) {
#if defined(__AVX512BF16__)
  return params.cache.dtype == CacheDType::BF16 && params.kv_lora_rank % 16 == 0 && params.qk_rope_head_dim % 2 == 0;
#else
  return false;
#endif
}

bool mla_absorbed_on_tiles(int64_t n_heads, int64_t kv_lora_rank, int64_t qk_rope_head_dim, CacheDType cache_dtype) {
#ifdef MLA_AMX
  const MlaDecodeKernel plan = mla_decode_plan(n_heads, mla_decode_kernel());
  const int64_t heads = plan == MlaDecodeKernel::Blocked  ? n_heads
                        : plan == MlaDecodeKernel::Padded ? mla_padded_heads(n_heads)
                                                          : 0;
  MlaAbsorbedParams params;
  params.cache.dtype = cache_dtype;
  params.kv_lora_rank = kv_lora_rank;
  params.qk_rope_head_dim = qk_rope_head_dim;
  return heads > 0 && heads % 16 == 0 && AmxTiles::supports(params);
#else
  (void)n_heads, (void)kv_lora_rank, (void)qk_rope_head_dim, (void)cache_dtype;
  return false;
#endif
}

void mla_absorbed_blocked(std::span<const MlaAbsorbedParams> batch) {
  if (batch.empty()) return;
  const int64_t n_heads = batch[0].n_heads;
  MLA_CHECK(mla_blocked_supports(n_heads), "the blocked MLA kernel does not support {} heads", n_heads);
  if (n_heads == 4) return blocked<4>(batch);
  if (n_heads == 8) return blocked<8>(batch);
  blocked<16>(batch);
}

void mla_absorbed_blocked(const MlaAbsorbedParams& params) { mla_absorbed_blocked(std::span(&params, 1)); }

void mla_absorbed_generic(const MlaAbsorbedParams& params) {
  const int64_t rank = params.kv_lora_rank, rope = params.qk_rope_head_dim;
  thread_pool().parallel_for(params.n_queries * params.n_heads, [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores, buffer;  // the running thread's own, reused across calls
    scores.resize(size_t(params.first_position + params.n_queries));
    buffer.resize(size_t(rank + rope));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t query = item / params.n_heads;
      const int64_t n_visible = params.first_position + query + 1;
      const float* q_latent = params.q_latent + item * rank;
      const float* q_pe = params.q_pe + item * rope;
      for (int64_t position = 0; position < n_visible; ++position) {
        const float* row = row_f32(params, position, buffer.data());
        scores[size_t(position)] =
            params.softmax_scale * (simd::dot_f32(q_latent, row, rank) + simd::dot_f32(q_pe, row + rank, rope));
      }
      softmax_in_place(scores.data(), n_visible);
      float* out = params.out_latent + item * rank;
      std::fill(out, out + rank, 0.0f);
      for (int64_t position = 0; position < n_visible; ++position)
        simd::axpy(scores[size_t(position)], row_f32(params, position, buffer.data()), out, rank);
    }
  });
}

}  // namespace mlaserve
