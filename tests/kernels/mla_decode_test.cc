// Absorbed MLA decode kernels (generic, head-blocked, padded, and the dispatcher) against a
// float64 scalar reference: random queries and a paged cache whose blocks are out of order,
// head counts native to the blocked kernel and not (12 is Kimi K3's per-rank count at TP 8),
// short and long contexts (long ones split positions over threads), several queries.
#include "kernels/mla_decode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/mla_decode_tiles.h"
#include "test_util.h"

namespace mlaserve {
namespace {

// The process's kernel config with another choice for head counts not native to the blocked kernel.
KernelConfig with_mla_decode(MlaDecodeKernel choice) {
  KernelConfig config = kernel_config();
  config.mla_decode = choice;
  return config;
}

// A cached row of 96 values: a multiple of 32, so 16 heads over a bf16 cache take the AMX tiles
// on AMX hosts (tiles crossing cache blocks of 16 positions, and partial ones, included).
constexpr int64_t kRank = 64, kRope = 32, kBlock = 16;

struct Case {
  int64_t n_heads, n_queries, first_position;
  CacheDType dtype;
  int64_t rope = kRope;  // 16: 40 bf16 pairs a row, two blocks of 16 and 8 (and no AMX tiles)
  int64_t rank = kRank;  // 320: an FP8 row of three scale blocks, the last of 64 codes
};

struct Fixture {
  std::vector<float> q_latent, q_pe;
  std::vector<uint8_t> pool;
  std::vector<int32_t> table;
  MlaAbsorbedParams params;
};

Fixture make(const Case& c, uint64_t seed = 0) {
  Fixture f;
  const int64_t width = c.rank + c.rope;
  const int64_t positions = c.first_position + c.n_queries, n_blocks = (positions + kBlock - 1) / kBlock;
  f.q_latent = testing::random_vector(size_t(c.n_queries * c.n_heads * c.rank), 1 + 10 * seed, 0.3f);
  f.q_pe = testing::random_vector(size_t(c.n_queries * c.n_heads * c.rope), 2 + 10 * seed, 0.3f);
  f.table.resize(size_t(n_blocks));
  std::iota(f.table.rbegin(), f.table.rend(), 0);  // reversed: block b of the sequence is pool block n-1-b
  f.pool.resize(size_t(n_blocks * kBlock * 2 * cache_row_bytes(c.dtype, width, c.rope)));
  f.params.cache = {f.pool.data(), c.dtype, f.table.data(), n_blocks, kBlock, 2, width, -1, c.rope};
  const std::vector<float> rows = testing::random_vector(size_t(positions * width), 3 + 10 * seed);
  for (int64_t s = 0; s < positions; ++s) f.params.cache.store(1, s, rows.data() + s * width);
  f.params.q_latent = f.q_latent.data();
  f.params.q_pe = f.q_pe.data();
  f.params.layer = 1;
  f.params.n_queries = c.n_queries;
  f.params.first_position = c.first_position;
  f.params.n_heads = c.n_heads;
  f.params.kv_lora_rank = c.rank;
  f.params.qk_rope_head_dim = c.rope;
  f.params.softmax_scale = 0.2f;
  return f;
}

// In float64 over the cache's values as load() reads them (an FP8 cache's dequantised).
std::vector<float> reference(const Fixture& f) {
  const MlaAbsorbedParams& p = f.params;
  const int64_t rope = p.qk_rope_head_dim, rank = p.kv_lora_rank;
  std::vector<float> out(size_t(p.n_queries * p.n_heads * rank));
  std::vector<float> row(size_t(rank + rope));
  for (int64_t q = 0; q < p.n_queries; ++q)
    for (int64_t h = 0; h < p.n_heads; ++h) {
      const int64_t item = q * p.n_heads + h, n_visible = p.first_position + q + 1;
      std::vector<double> scores(static_cast<size_t>(n_visible));
      for (int64_t s = 0; s < n_visible; ++s) {
        p.cache.load(p.layer, s, 0, rank + rope, row.data());
        double dot = 0;
        for (int64_t d = 0; d < rank; ++d) dot += double(p.q_latent[item * rank + d]) * row[size_t(d)];
        for (int64_t d = 0; d < rope; ++d) dot += double(p.q_pe[item * rope + d]) * row[size_t(rank + d)];
        scores[size_t(s)] = p.softmax_scale * dot;
      }
      const double max = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& score : scores) sum += score = std::exp(score - max);
      std::vector<double> acc(static_cast<size_t>(rank), 0.0);
      for (int64_t s = 0; s < n_visible; ++s) {
        p.cache.load(p.layer, s, 0, rank, row.data());
        for (int64_t d = 0; d < rank; ++d) acc[size_t(d)] += scores[size_t(s)] / sum * row[size_t(d)];
      }
      for (int64_t d = 0; d < rank; ++d) out[size_t(item * rank + d)] = float(acc[size_t(d)]);
    }
  return out;
}

TEST(MlaDecode, EveryKernelMatchesTheReference) {
  ScopedThreadPool pool(2);
  for (const Case& c :
       {Case{1, 1, 0, CacheDType::F32}, Case{3, 2, 40, CacheDType::BF16}, Case{4, 1, 700, CacheDType::BF16},
        Case{8, 3, 300, CacheDType::F32}, Case{12, 1, 1023, CacheDType::BF16}, Case{12, 2, 5, CacheDType::F32},
        Case{16, 1, 600, CacheDType::BF16}, Case{17, 1, 50, CacheDType::BF16}, Case{32, 2, 520, CacheDType::F32},
        Case{16, 1, 300, CacheDType::BF16, 16}, Case{8, 2, 90, CacheDType::BF16, 16}, Case{1, 1, 0, CacheDType::FP8},
        Case{4, 1, 700, CacheDType::FP8}, Case{12, 1, 1023, CacheDType::FP8}, Case{16, 2, 600, CacheDType::FP8},
        Case{8, 3, 300, CacheDType::FP8, 16}, Case{16, 1, 400, CacheDType::FP8, kRope, 320},
        Case{12, 1, 200, CacheDType::FP8, 16, 320}}) {
    Fixture f = make(c);
    const std::vector<float> want = reference(f);
    std::vector<float> got(want.size());
    f.params.out_latent = got.data();
    const std::string label = "heads " + std::to_string(c.n_heads) + ", position " + std::to_string(c.first_position);
    mla_absorbed_generic(f.params);
    EXPECT_TRUE(testing::relative_close(got, want, 1e-5)) << "generic, " << label;
    for (MlaDecodeKernel choice : {MlaDecodeKernel::Padded, MlaDecodeKernel::Generic, MlaDecodeKernel::Auto}) {
      std::fill(got.begin(), got.end(), NAN);
      const ScopedKernelConfig use(with_mla_decode(choice));
      mla_absorbed_attention(f.params);
      // bf16 products round each query and softmax weight once (unit roundoff 2^-9 ~ 2e-3):
      // measured 1.8e-3 - 2.4e-3 of the largest output here, so 5 roundoffs.
      const bool bf16 = choose_mla_decode_kernel(c.n_heads, with_mla_decode(choice)) != MlaDecodeKernel::Generic &&
                        mla_blocked_bf16_products(f.params);
      EXPECT_TRUE(testing::relative_close(got, want, bf16 ? 1e-2 : 1e-5))
          << mla_decode_kernel_name(choice) << ", " << label;
    }
  }
}

// More threads than (query, head block) pairs split each pair's positions into parts; with
// several head blocks a query (32 and 48 heads), a thread runs a query's blocks of one part
// together, and the parts of a block lie a block count apart when they are merged.
TEST(MlaDecode, PartsOfSeveralHeadBlocksMergeIntoEachBlock) {
  ScopedThreadPool pool(8);
  for (const Case& c :
       {Case{48, 1, 700, CacheDType::BF16}, Case{32, 1, 300, CacheDType::F32}, Case{32, 1, 500, CacheDType::FP8}}) {
    Fixture f = make(c, 5);
    const std::vector<float> want = reference(f);
    std::vector<float> got(want.size(), NAN);
    f.params.out_latent = got.data();
    mla_absorbed_attention(f.params);
    const bool bf16 =
        choose_mla_decode_kernel(c.n_heads, with_mla_decode(MlaDecodeKernel::Auto)) != MlaDecodeKernel::Generic &&
        mla_blocked_bf16_products(f.params);
    EXPECT_TRUE(testing::relative_close(got, want, bf16 ? 1e-2 : 1e-5)) << "heads " << c.n_heads;
  }
}

// A decode step's sequences in one call (one pass over the threads for the blocked kernel):
// each sequence, at its own depth and with its own queries and cache, gets its own reference.
TEST(MlaDecode, ABatchOfSequencesMatchesEachReference) {
  ScopedThreadPool pool(2);
  for (CacheDType dtype : {CacheDType::F32, CacheDType::BF16, CacheDType::FP8})
    for (int64_t n_heads : {16, 12, 8, 1}) {
      std::vector<Fixture> fixtures;
      std::vector<std::vector<float>> want, got;
      uint64_t seed = 0;
      for (const auto& [n_queries, first_position] : {std::pair<int64_t, int64_t>{1, 0}, {1, 130}, {2, 700}, {1, 47}}) {
        fixtures.push_back(make(Case{n_heads, n_queries, first_position, dtype}, ++seed));
        want.push_back(reference(fixtures.back()));
        got.emplace_back(want.back().size());
      }
      for (MlaDecodeKernel choice : {MlaDecodeKernel::Padded, MlaDecodeKernel::Generic, MlaDecodeKernel::Auto}) {
        std::vector<MlaAbsorbedParams> batch;
        for (size_t s = 0; s < fixtures.size(); ++s) {
          std::fill(got[s].begin(), got[s].end(), NAN);
          batch.push_back(fixtures[s].params);
          batch.back().out_latent = got[s].data();
        }
        const ScopedKernelConfig use(with_mla_decode(choice));
        mla_absorbed_attention(batch);
        const bool bf16 = choose_mla_decode_kernel(n_heads, with_mla_decode(choice)) != MlaDecodeKernel::Generic &&
                          mla_blocked_bf16_products(batch[0]);
        for (size_t s = 0; s < fixtures.size(); ++s)
          EXPECT_TRUE(testing::relative_close(got[s], want[s], bf16 ? 1e-2 : 1e-5))
              << mla_decode_kernel_name(choice) << ", heads " << n_heads << ", sequence " << s << ", "
              << cache_dtype_name(dtype);
      }
    }
}

// Zero queries score every position alike, so every softmax weight is exactly 1 (in bf16
// too) and each head's output is the plain mean of the cached rows: whatever the products'
// precision, a row dropped, counted twice or read at the wrong columns (an odd row at a
// tile's or a thread's end, the bf16 kernel's interleaved row pairs) shows at fp32 precision.
TEST(MlaDecode, UniformAttentionAveragesEveryRowOnce) {
  ScopedThreadPool pool(2);
  for (const Case& c :
       {Case{16, 1, 700, CacheDType::BF16}, Case{12, 1, 96, CacheDType::BF16}, Case{8, 2, 48, CacheDType::BF16},
        Case{4, 1, 1022, CacheDType::BF16}, Case{16, 1, 700, CacheDType::F32}, Case{16, 1, 700, CacheDType::FP8},
        Case{12, 1, 96, CacheDType::FP8, kRope, 320}, Case{8, 2, 48, CacheDType::FP8, 16}}) {
    Fixture f = make(c);
    std::fill(f.q_latent.begin(), f.q_latent.end(), 0.0f);
    std::fill(f.q_pe.begin(), f.q_pe.end(), 0.0f);
    const std::vector<float> want = reference(f);
    std::vector<float> got(want.size(), NAN);
    f.params.out_latent = got.data();
    mla_absorbed_attention(f.params);
    EXPECT_TRUE(testing::relative_close(got, want, 1e-5)) << "heads " << c.n_heads << ", position " << c.first_position;
  }
}

// read_next is a prefetch hint: with it (two ranges, one not a whole number of lines) every
// kernel gives the same bits as without; more than two ranges are refused by count.
TEST(MlaDecode, ReadNextChangesNoBit) {
  ScopedThreadPool pool(2);
  const std::vector<uint8_t> weights(300000, 7);
  const ByteRange read_next[] = {{weights.data(), 1000}, {weights.data() + 4096, 250001}};
  for (const Case& c :
       {Case{16, 1, 700, CacheDType::BF16}, Case{12, 1, 300, CacheDType::F32}, Case{8, 2, 200, CacheDType::BF16}}) {
    Fixture f = make(c);
    std::vector<float> alone(size_t(c.n_queries * c.n_heads * c.rank)), hinted(alone.size());
    f.params.out_latent = alone.data();
    mla_absorbed_attention(f.params);
    f.params.out_latent = hinted.data();
    mla_absorbed_attention(std::span(&f.params, 1), read_next);
    EXPECT_EQ(0, std::memcmp(alone.data(), hinted.data(), alone.size() * sizeof(float))) << "heads " << c.n_heads;
  }
  Fixture f = make(Case{16, 1, 100, CacheDType::BF16});
  std::vector<float> out(size_t(16 * kRank));
  f.params.out_latent = out.data();
  const ByteRange three[] = {read_next[0], read_next[1], read_next[0]};
  EXPECT_THROW(
      {
        try {
          mla_absorbed_attention(std::span(&f.params, 1), three);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("3 ranges"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
}

// Thread t of T prefetches the t-th of T equal parts of each range in order, every 64 bytes
// of it from its start, and nothing else.
TEST(MlaDecodeTiles, ReadNextSharesSplitEachRangeOverTheThreads) {
  const std::vector<char> bytes(5000);
  const ByteRange ranges[] = {{bytes.data(), 1000}, {bytes.data() + 2000, 2999}};
  for (int64_t threads : {1, 2, 3})
    for (int64_t thread = 0; thread < threads; ++thread) {
      mla_tiles::ReadNextPrefetch prefetch(ranges, thread, threads);
      std::vector<const char*> want;
      for (const ByteRange& range : ranges) {
        const char* begin = static_cast<const char*>(range.begin);
        const char* end = begin + range.bytes * size_t(thread + 1) / size_t(threads);
        for (const char* line = begin + range.bytes * size_t(thread) / size_t(threads); line < end; line += 64)
          want.push_back(line);
      }
      std::vector<const char*> got;
      while (const char* line = prefetch.next_line()) got.push_back(line);
      EXPECT_EQ(got, want) << "thread " << thread << " of " << threads;
    }
}

// The next tile's prefetch asks for every line of its rows, each row where the paged cache
// keeps it (blocks out of order, rows of a block one layer's stride apart), and no other.
TEST(MlaDecodeTiles, NextRowsPrefetchCoversTheNextTilesRows) {
  for (CacheDType dtype : {CacheDType::BF16, CacheDType::F32, CacheDType::FP8}) {
    const Fixture f = make(Case{16, 1, 100, dtype});
    mla_tiles::ReadNextPrefetch nothing;
    mla_tiles::NextRowsPrefetch prefetch(f.params, 13, 40, nothing);  // rows 13..52: 4 cache blocks
    const int64_t row_bytes = cache_row_bytes(dtype, kRank + kRope, kRope);
    std::vector<const char*> want;
    for (int64_t position = 13; position < 53; ++position) {
      // Pool block table[position / kBlock], layer 1 of 2, row position % kBlock.
      const int64_t block = f.table[size_t(position / kBlock)];
      const char* row =
          reinterpret_cast<const char*>(f.pool.data()) + ((block * 2 + 1) * kBlock + position % kBlock) * row_bytes;
      for (int64_t offset = 0; offset < row_bytes; offset += 64) want.push_back(row + offset);
    }
    std::vector<const char*> got;
    while (const char* line = prefetch.next_line()) got.push_back(line);
    EXPECT_EQ(got, want) << cache_dtype_name(dtype);
  }
}

TEST(MlaDecode, DispatcherPadsToTheNextSupportedBlock) {
  EXPECT_EQ(mla_padded_heads(12), 16);
  EXPECT_EQ(mla_padded_heads(3), 4);
  EXPECT_EQ(mla_padded_heads(17), 32);
  EXPECT_EQ(choose_mla_decode_kernel(16, with_mla_decode(MlaDecodeKernel::Generic)),
            MlaDecodeKernel::Blocked);  // native
  EXPECT_EQ(choose_mla_decode_kernel(12, with_mla_decode(MlaDecodeKernel::Generic)), MlaDecodeKernel::Generic);
  EXPECT_EQ(choose_mla_decode_kernel(12, with_mla_decode(MlaDecodeKernel::Auto)), MlaDecodeKernel::Padded);
  EXPECT_EQ(choose_mla_decode_kernel(1, with_mla_decode(MlaDecodeKernel::Auto)), MlaDecodeKernel::Generic);
  EXPECT_THROW(mla_decode_kernel_from_name("fast"), Error);
}

}  // namespace
}  // namespace mlaserve
