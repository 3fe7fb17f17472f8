#include "kernels/latent_cache_view.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace mlaserve {
namespace {

// The power of two a block of magnitudes up to amax is divided by before rounding to E4M3:
// the smallest with amax / scale <= 448 (1 for an all-zero or non-finite block).
float fp8_block_scale(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  int exponent = 0;
  const float mantissa = std::frexp(amax / 448.0f, &exponent);  // amax / 448 = mantissa * 2^exponent
  return std::ldexp(1.0f, mantissa == 0.5f ? exponent - 1 : exponent);
}

}  // namespace

const char* cache_dtype_name(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::F32: return "fp32";
    case CacheDType::BF16: return "bf16";
    case CacheDType::FP8: return "fp8";
  }
  return "?";
}

CacheDType cache_dtype_from_name(const std::string& name) {
  if (name == "fp32") return CacheDType::F32;
  if (name == "bf16") return CacheDType::BF16;
  if (name == "fp8" || name == "fp8_e4m3") return CacheDType::FP8;
  fail("--kv-cache-dtype must be bf16, fp8 or fp32, not '{}'", name);
}

void fp8_row_store(const float* values, int64_t kv_lora_rank, int64_t rope_dim, uint8_t* row) {
  uint8_t* scales = row + kv_lora_rank;
  for (int64_t block = 0; block < fp8_scale_count(kv_lora_rank); ++block) {
    const int64_t begin = block * kFp8ScaleBlock, end = std::min(kv_lora_rank, begin + kFp8ScaleBlock);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i) amax = std::max(amax, std::fabs(values[i]));
    const float scale = fp8_block_scale(amax), inverse = 1.0f / scale;  // exact: a power of two
    for (int64_t i = begin; i < end; ++i) row[i] = f32_to_fp8_e4m3(values[i] * inverse);
    std::memcpy(scales + 4 * block, &scale, 4);
  }
  uint8_t* rope = scales + 4 * fp8_scale_count(kv_lora_rank);
  for (int64_t i = 0; i < rope_dim; ++i) {
    const uint16_t word = f32_to_bf16(values[kv_lora_rank + i]);
    std::memcpy(rope + 2 * i, &word, 2);
  }
}

void fp8_row_load(const uint8_t* row, int64_t kv_lora_rank, int64_t first, int64_t count, float* out) {
  const float* table = fp8_e4m3_table();
  const uint8_t* scales = row + kv_lora_rank;
  const int64_t end = first + count;
  // The latent's values a scale block at a time (its scale read once), then the rope key's.
  for (int64_t i = first; i < std::min(end, kv_lora_rank);) {
    const int64_t block_end = std::min({end, kv_lora_rank, (i / kFp8ScaleBlock + 1) * kFp8ScaleBlock});
    float scale;
    std::memcpy(&scale, scales + 4 * (i / kFp8ScaleBlock), 4);
    for (; i < block_end; ++i) out[i - first] = table[row[i]] * scale;
  }
  const uint8_t* rope = scales + 4 * fp8_scale_count(kv_lora_rank);
  for (int64_t i = std::max(first, kv_lora_rank); i < end; ++i) {
    uint16_t word;
    std::memcpy(&word, rope + 2 * (i - kv_lora_rank), 2);
    out[i - first] = bf16_to_f32(word);
  }
}

}  // namespace mlaserve
