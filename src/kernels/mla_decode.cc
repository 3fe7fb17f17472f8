#include "kernels/mla_decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/amx_gemm.h"
#include "kernels/attention.h"
#include "kernels/mla_decode_tiles.h"
#include "kernels/simd.h"

namespace MLASERVE_KERNELS_NS {
namespace {

using mla_tiles::Fp32Tiles, mla_tiles::kTile, mla_tiles::NextRowsPrefetch, mla_tiles::ReadNextPrefetch,
    mla_tiles::row_f32;
#if defined(__AVX512BF16__)
using mla_tiles::Bf16Tiles;
#endif
#ifdef MLA_AMX
using mla_tiles::AmxTiles;
#endif

// One block of B heads of one query over positions [begin, end): running max, sum of
// exp(score - max) and the unnormalised sum of exp(score - max) * c, per head.
template <int B>
struct Partial {
  float max[B], sum[B];
  float* acc;  // [B, kv_lora_rank]
};

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
void blocked_parts(const BlockedItem* items, Partial<B>* parts, int count, ReadNextPrefetch& read_next) {
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
    NextRowsPrefetch next(p, tile + n, std::min(kTile, end - tile - n), read_next), none;
#if defined(__AVX512BF16__)
    if constexpr (!std::is_same_v<Tiles, Fp32Tiles<B>>) mla_tiles::stage_bf16_tile(p, tile, n);
#endif
    for (int b = 0; b < count; ++b) {
      // The blocks share the rows: the first block's scores prefetch the next tile's (and the
      // caller's next reads). Only the fp32 tiles prefetch: measured on AVX2 (Zen 2); the bf16
      // and AMX tiles compute twice as fast and were not measured with it.
      if constexpr (std::is_same_v<Tiles, Fp32Tiles<B>>)
        tiles[b]->score(tile, n, scores, b == 0 ? next : none);
      else
        tiles[b]->score(n, scores);
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

// A (query, head block) of one part: its output is its sums normalised, written by the thread
// that computed them (a batch's decode step, where each pair is one part, left all of them to
// merge_parts on one thread).
template <int B>
void write_whole(const BlockedItem& item, const Partial<B>& partial, int64_t rank) {
  for (int h = 0; h < B; ++h) {
    float* out = item.p->out_latent + (item.query * item.p->n_heads + item.head0 + h) * rank;
    const float* acc = partial.acc + h * rank;
    const float inverse = 1.0f / partial.sum[h];
    for (int64_t d = 0; d < rank; ++d) out[d] = acc[d] * inverse;
  }
}

// Each (query, head block)'s parts merged into its output: each part rescaled to the common
// maximum, then normalised. A pair's parts lie a query's block count apart (plan_items' order).
// Pairs of one part were written by write_whole.
template <int B>
void merge_parts(const std::vector<BlockedItem>& items, const std::vector<Partial<B>>& partials, int64_t rank) {
  for (size_t first = 0; first < items.size(); ++first) {
    const BlockedItem& item = items[first];
    if (item.part != 0 || item.parts == 1) continue;
    const size_t stride = size_t(item.p->n_heads / B);
    for (int h = 0; h < B; ++h) {
      float max = -INFINITY, sum = 0.0f;
      for (int64_t part = 0; part < item.parts; ++part)
        max = std::max(max, partials[first + size_t(part) * stride].max[h]);
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
// contiguous shares of their cost: one pass a sequence would leave threads idle (a decoding
// sequence with 16 heads is one item) and cost a dispatch each.
template <int B>
void blocked(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next, bool amx) {
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
  for (size_t i = 0; i < items.size(); ++i) partials[i].acc = accumulators.data() + i * size_t(B * rank);
  // The tile kernel, alike for every sequence of the step (one shape, one cache dtype).
  [[maybe_unused]] const bool bf16_products = mla_blocked_bf16_products(batch[0]);  // false without AVX512_BF16
#ifdef MLA_AMX
  const bool amx_tiles = B == 16 && amx && AmxTiles::supports(batch[0]);
#endif
  const auto run_parts = [&](const BlockedItem* first, Partial<B>* parts, int count, ReadNextPrefetch& prefetch) {
#ifdef MLA_AMX
    if constexpr (B == 16)
      if (amx_tiles) return blocked_parts<B, AmxTiles>(first, parts, count, prefetch);
#endif
#if defined(__AVX512BF16__)
    if (bf16_products) return blocked_parts<B, Bf16Tiles<B>>(first, parts, count, prefetch);
#endif
    blocked_parts<B, Fp32Tiles<B>>(first, parts, count, prefetch);
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
    ReadNextPrefetch prefetch(read_next, first_thread, threads);
    for (auto i = size_t(first - costs.begin()); i < end;) {
      size_t j = i + 1;
      while (j < end && j - i < kMostBlocks && same_positions(i, j)) ++j;
      run_parts(&items[i], &partials[i], int(j - i), prefetch);
      for (; i < j; ++i)
        if (items[i].parts == 1) write_whole<B>(items[i], partials[i], rank);
    }
  });
  merge_parts<B>(items, partials, rank);
}

}  // namespace

bool mla_blocked_bf16_products(const MlaAbsorbedParams& params) {
#if defined(__AVX512BF16__)
  return params.cache.dtype != CacheDType::F32 && params.kv_lora_rank % 16 == 0 && params.qk_rope_head_dim % 2 == 0;
#else
  return false;
#endif
}

bool mla_amx_tiles_take(const MlaAbsorbedParams& params) {
#ifdef MLA_AMX
  return AmxTiles::supports(params);
#else
  (void)params;
  return false;
#endif
}

void mla_absorbed_blocked(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next, bool amx) {
  if (batch.empty()) return;
  const int64_t n_heads = batch[0].n_heads;
  MLA_CHECK(mla_blocked_supports(n_heads), "the blocked MLA kernel does not support {} heads", n_heads);
  MLA_CHECK(read_next.size() <= ReadNextPrefetch::kMostRanges, "{} ranges to prefetch after MLA decode, at most {}",
            read_next.size(), ReadNextPrefetch::kMostRanges);
  if (n_heads == 4) return blocked<4>(batch, read_next, amx);
  if (n_heads == 8) return blocked<8>(batch, read_next, amx);
  blocked<16>(batch, read_next, amx);
}

void mla_absorbed_padded(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next, bool amx) {
  if (batch.empty()) return;
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
  mla_absorbed_blocked(wide, read_next, amx);
  for (int64_t first = 0; const auto& p : batch) {
    for (int64_t query = 0; query < p.n_queries; ++query)
      std::memcpy(p.out_latent + query * n_heads * rank, out.data() + (first + query) * heads * rank,
                  size_t(n_heads * rank) * sizeof(float));
    first += p.n_queries;
  }
}

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

}  // namespace MLASERVE_KERNELS_NS
