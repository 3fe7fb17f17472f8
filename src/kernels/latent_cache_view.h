// How kernels see one sequence's MLA latent cache: rows of kv_lora_rank + qk_rope_head_dim
// values per (layer, position) — the normalised compressed KV, then the rotated rope key —
// stored in blocks of block_size positions, as bf16 (default) or fp32. Block b of the
// sequence lives at pool block block_table[b]; each pool block holds all layers:
// [n_layers, block_size, latent_dim].
#pragma once
#include <cstdint>
#include <cstring>

#include "base/dtype.h"

namespace mlaserve {

enum class CacheDType { F32, BF16 };

inline size_t cache_dtype_size(CacheDType dtype) { return dtype == CacheDType::F32 ? 4 : 2; }

struct LatentCacheView {
  void* pool = nullptr;                   // [n_pool_blocks, n_layers, block_size, latent_dim]
  CacheDType dtype = CacheDType::F32;
  const int32_t* block_table = nullptr;   // [n_blocks]: pool block of each sequence block
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_layers = 0;
  int64_t latent_dim = 0;  // kv_lora_rank + qk_rope_head_dim
  // Models with recurrent layers (Kimi Linear's KDA): this sequence's state lives at
  // pool + state_offset bytes (relative to the pool, so every rank's copy resolves it). -1: none.
  int64_t state_offset = -1;

  int64_t capacity() const { return n_blocks * block_size; }
  float* state() const {
    return state_offset < 0 ? nullptr : reinterpret_cast<float*>(static_cast<uint8_t*>(pool) + state_offset);
  }
  // Element index of (layer, position) in the pool.
  int64_t offset(int64_t layer, int64_t position) const {
    const int64_t block = block_table[position / block_size];
    return ((block * n_layers + layer) * block_size + position % block_size) * latent_dim;
  }
  const float* f32_row(int64_t layer, int64_t position) const {
    return static_cast<const float*>(pool) + offset(layer, position);
  }
  const uint16_t* bf16_row(int64_t layer, int64_t position) const {
    return static_cast<const uint16_t*>(pool) + offset(layer, position);
  }
  void store(int64_t layer, int64_t position, const float* row) const {
    if (dtype == CacheDType::F32) {
      std::memcpy(static_cast<float*>(pool) + offset(layer, position), row, size_t(latent_dim) * 4);
      return;
    }
    uint16_t* out = static_cast<uint16_t*>(pool) + offset(layer, position);
    for (int64_t i = 0; i < latent_dim; ++i) out[i] = f32_to_bf16(row[i]);
  }
  // out[0, count) = row[first, first + count) in fp32.
  void load(int64_t layer, int64_t position, int64_t first, int64_t count, float* out) const {
    if (dtype == CacheDType::F32) {
      std::memcpy(out, f32_row(layer, position) + first, size_t(count) * 4);
      return;
    }
    const uint16_t* in = bf16_row(layer, position) + first;
    for (int64_t i = 0; i < count; ++i) out[i] = bf16_to_f32(in[i]);
  }
};

}  // namespace mlaserve
