// The FP8 latent cache row (latent_cache_view.h) against its definition, written out here from
// E4M3's values: per block of 128 latent values the smallest power-of-two scale bringing the
// largest magnitude to 448 or below, each value the nearest E4M3 value times it (ties to the
// even code), the rope key in bf16; and the bytes where FlashMLA's fp8_ds_mla puts them.
#include "kernels/latent_cache_view.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"

namespace mlaserve {
namespace {

// The nearest E4M3 code to |x| (<= 448) by search over every value, ties to the even code.
int nearest_code(float magnitude) {
  int best = 0;
  for (int code = 1; code < 0x7f; ++code) {
    const float error = std::fabs(fp8_e4m3_to_f32(uint8_t(code)) - magnitude);
    const float best_error = std::fabs(fp8_e4m3_to_f32(uint8_t(best)) - magnitude);
    if (error < best_error || (error == best_error && code % 2 == 0)) best = code;
  }
  return best;
}

// A row of rank + rope values whose blocks span magnitudes from 1e-30 to 1e30 (one block zero).
std::vector<float> test_row(int64_t rank, int64_t rope, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::normal_distribution<float> normal;
  const float block_scale[] = {1.0f, 1e-30f, 0.0f, 1e30f, 3.7f, 1e-3f};
  std::vector<float> row(size_t(rank + rope));
  for (int64_t i = 0; i < rank + rope; ++i)
    row[size_t(i)] = normal(rng) * (i < rank ? block_scale[(i / kFp8ScaleBlock) % 6] : 1.0f);
  return row;
}

TEST(LatentCacheFp8, RowIsTheFormatsDefinition) {
  for (const auto& [rank, rope] : {std::pair<int64_t, int64_t>{512, 64}, {320, 16}, {64, 32}, {768, 64}}) {
    const int64_t blocks = (rank + 127) / 128;
    ASSERT_EQ(cache_row_bytes(CacheDType::FP8, rank + rope, rope), rank + 4 * blocks + 2 * rope);
    const std::vector<float> values = test_row(rank, rope, uint64_t(rank));
    std::vector<uint8_t> row(size_t(cache_row_bytes(CacheDType::FP8, rank + rope, rope)));
    fp8_row_store(values.data(), rank, rope, row.data());
    for (int64_t block = 0; block < blocks; ++block) {
      float scale, amax = 0.0f;
      std::memcpy(&scale, row.data() + rank + 4 * block, 4);
      const int64_t begin = block * 128, end = std::min(rank, begin + 128);
      for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(values[size_t(i)]));
      int exponent = 0;
      ASSERT_EQ(std::frexp(scale, &exponent), 0.5f) << "a power of two";
      if (amax == 0.0f) {
        EXPECT_EQ(scale, 1.0f);
      } else {
        EXPECT_LE(amax / scale, 448.0f) << "block " << block;
        EXPECT_GT(amax / scale, 224.0f) << "the smallest such power of two, block " << block;
      }
      for (int64_t i = begin; i < end; ++i) {
        const float x = values[size_t(i)] / scale;
        const uint8_t want = uint8_t((x < 0 ? 0x80 : 0) | nearest_code(std::fmin(std::fabs(x), 448.0f)));
        ASSERT_EQ(row[size_t(i)] & 0x7f, want & 0x7f) << "value " << i;
        if ((want & 0x7f) != 0) {
          ASSERT_EQ(row[size_t(i)], want) << "value " << i;
        }
      }
    }
    for (int64_t i = 0; i < rope; ++i) {
      uint16_t word;
      std::memcpy(&word, row.data() + rank + 4 * blocks + 2 * i, 2);
      EXPECT_EQ(word, f32_to_bf16(values[size_t(rank + i)])) << "rope " << i;
    }
  }
}

// load() reads back code x scale and the bf16 rope key, over any range of the row.
TEST(LatentCacheFp8, ViewReadsBackEveryRange) {
  const int64_t rank = 320, rope = 16, width = rank + rope;
  std::vector<int32_t> table = {1, 0};
  std::vector<uint8_t> pool(size_t(2 * 2 * 4 * cache_row_bytes(CacheDType::FP8, width, rope)));
  const LatentCacheView view{pool.data(), CacheDType::FP8, table.data(), 2, 4, 2, width, -1, rope};
  const std::vector<float> values = test_row(rank, rope, 9);
  view.store(1, 5, values.data());
  std::vector<float> whole(static_cast<size_t>(width));
  view.load(1, 5, 0, width, whole.data());
  const uint8_t* row = view.row(1, 5);
  EXPECT_EQ(row, pool.data() + ((0 * 2 + 1) * 4 + 1) * view.row_bytes());  // position 5: block 1 -> pool block 0
  for (int64_t i = 0; i < width; ++i) {
    float scale;
    std::memcpy(&scale, row + rank + 4 * (std::min(i, rank - 1) / 128), 4);
    const float want = i < rank ? fp8_e4m3_to_f32(row[i]) * scale : bf16_to_f32(f32_to_bf16(values[size_t(i)]));
    ASSERT_EQ(whole[size_t(i)], want) << i;
  }
  for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, rank}, {rank, rope}, {300, 30}, {127, 2}}) {
    std::vector<float> part(static_cast<size_t>(count));
    view.load(1, 5, first, count, part.data());
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(part[size_t(i)], whole[size_t(first + i)]) << first << "+" << i;
  }
}

TEST(LatentCacheFp8, DtypeNames) {
  for (CacheDType dtype : {CacheDType::F32, CacheDType::BF16, CacheDType::FP8})
    EXPECT_EQ(cache_dtype_from_name(cache_dtype_name(dtype)), dtype);
  EXPECT_EQ(cache_row_bytes(CacheDType::FP8, 576, 64), 656);  // DeepSeek-V3: FlashMLA's fp8_ds_mla
  EXPECT_EQ(cache_row_bytes(CacheDType::BF16, 576, 64), 1152);
  EXPECT_THROW(cache_dtype_from_name("int4"), Error);
}

}  // namespace
}  // namespace mlaserve
