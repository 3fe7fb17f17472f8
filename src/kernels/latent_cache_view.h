// How kernels see one sequence's MLA latent cache: a row per (layer, position) holding the
// normalised compressed KV (kv_lora_rank values) and the rotated rope key (rope_dim values),
// stored in blocks of block_size positions. Block b of the sequence lives at pool block
// block_table[b]; each pool block holds all layers: [n_layers, block_size, row].
//
// A row's layout by CacheDType:
//   F32, BF16  latent_dim values of 4 or 2 bytes;
//   FP8        FlashMLA's fp8_ds_mla: kv_lora_rank E4M3 codes, then one fp32 scale per 128
//              codes (the last block may be shorter), then the rope key in bf16. Each scale is
//              a power of two (the smallest with the block's largest magnitude / scale <= 448),
//              so a code times its scale is exact in bf16 and in fp32: the kernels widen an FP8
//              row into the bf16 row it stands for, and compute on it as on a BF16 cache's.
//              DeepSeek-V3's row: 512 + 16 + 128 = 656 bytes against BF16's 1,152.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "base/dtype.h"

namespace mlaserve {

enum class CacheDType { F32, BF16, FP8 };

const char* cache_dtype_name(CacheDType dtype);             // fp32 | bf16 | fp8
CacheDType cache_dtype_from_name(const std::string& name);  // those names; throws naming them otherwise

inline constexpr int64_t kFp8ScaleBlock = 128;  // E4M3 codes sharing one scale
inline int64_t fp8_scale_count(int64_t kv_lora_rank) { return (kv_lora_rank + kFp8ScaleBlock - 1) / kFp8ScaleBlock; }

// Bytes of one cached row of latent_dim values, rope_dim of them the rope key.
inline int64_t cache_row_bytes(CacheDType dtype, int64_t latent_dim, int64_t rope_dim) {
  if (dtype == CacheDType::F32) return latent_dim * 4;
  if (dtype == CacheDType::BF16) return latent_dim * 2;
  const int64_t rank = latent_dim - rope_dim;
  return rank + 4 * fp8_scale_count(rank) + 2 * rope_dim;
}

// One FP8 row from latent_dim fp32 values (the first kv_lora_rank quantised per block of 128,
// the rest rounded to bf16), and back: out[0, count) = value[first, first + count) in fp32.
void fp8_row_store(const float* values, int64_t kv_lora_rank, int64_t rope_dim, uint8_t* row);
void fp8_row_load(const uint8_t* row, int64_t kv_lora_rank, int64_t first, int64_t count, float* out);

struct LatentCacheView {
  void* pool = nullptr;  // [n_pool_blocks, n_layers, block_size, row]
  CacheDType dtype = CacheDType::F32;
  const int32_t* block_table = nullptr;  // [n_blocks]: pool block of each sequence block
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_layers = 0;
  int64_t latent_dim = 0;  // kv_lora_rank + qk_rope_head_dim
  // Models with recurrent layers (Kimi Linear's KDA): this sequence's state lives at
  // pool + state_offset bytes (relative to the pool, so every rank's copy resolves it). -1: none.
  int64_t state_offset = -1;
  int64_t rope_dim = 0;  // qk_rope_head_dim: the row's last values, kept in bf16 by an FP8 row

  int64_t capacity() const { return n_blocks * block_size; }
  int64_t kv_lora_rank() const { return latent_dim - rope_dim; }
  int64_t row_bytes() const { return cache_row_bytes(dtype, latent_dim, rope_dim); }
  float* state() const {
    return state_offset < 0 ? nullptr : reinterpret_cast<float*>(static_cast<uint8_t*>(pool) + state_offset);
  }
  // The row of (layer, position).
  uint8_t* row(int64_t layer, int64_t position) const {
    const int64_t block = block_table[position / block_size];
    return static_cast<uint8_t*>(pool) +
           ((block * n_layers + layer) * block_size + position % block_size) * row_bytes();
  }
  const float* f32_row(int64_t layer, int64_t position) const {
    return reinterpret_cast<const float*>(row(layer, position));
  }
  const uint16_t* bf16_row(int64_t layer, int64_t position) const {
    return reinterpret_cast<const uint16_t*>(row(layer, position));
  }
  void store(int64_t layer, int64_t position, const float* values) const {
    uint8_t* out = row(layer, position);
    if (dtype == CacheDType::F32) {
      std::memcpy(out, values, size_t(latent_dim) * 4);
    } else if (dtype == CacheDType::BF16) {
      auto* words = reinterpret_cast<uint16_t*>(out);
      for (int64_t i = 0; i < latent_dim; ++i) words[i] = f32_to_bf16(values[i]);
    } else {
      fp8_row_store(values, kv_lora_rank(), rope_dim, out);
    }
  }
  // out[0, count) = row[first, first + count) in fp32.
  void load(int64_t layer, int64_t position, int64_t first, int64_t count, float* out) const {
    if (dtype == CacheDType::F32) {
      std::memcpy(out, f32_row(layer, position) + first, size_t(count) * 4);
    } else if (dtype == CacheDType::BF16) {
      const uint16_t* in = bf16_row(layer, position) + first;
      for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_f32(in[i]);
    } else {
      fp8_row_load(row(layer, position), kv_lora_rank(), first, count, out);
    }
  }
};

}  // namespace mlaserve
