// How kernels see one sequence's MLA latent cache: rows of kv_lora_rank + qk_rope_head_dim
// floats per (layer, position) — the normalised compressed KV, then the rotated rope key —
// stored in blocks of block_size positions. Block b of the sequence lives at pool block
// block_table[b]; each pool block holds all layers: [n_layers, block_size, latent_dim].
#pragma once
#include <cstdint>

namespace mlaserve {

struct LatentCacheView {
  float* pool = nullptr;               // [n_pool_blocks, n_layers, block_size, latent_dim]
  const int32_t* block_table = nullptr;  // [n_blocks]: pool block of each sequence block
  int64_t n_blocks = 0;
  int64_t block_size = 0;
  int64_t n_layers = 0;
  int64_t latent_dim = 0;  // kv_lora_rank + qk_rope_head_dim

  int64_t capacity() const { return n_blocks * block_size; }
  float* row(int64_t layer, int64_t position) const {
    const int64_t block = block_table[position / block_size];
    return pool + ((block * n_layers + layer) * block_size + position % block_size) * latent_dim;
  }
};

}  // namespace mlaserve
