// What the AMX kernels (amx_gemm.cc: BF16, FP8 and INT8 on AMX-BF16; amx_gemm_4bit.cc: the 4-bit
// formats on AMX-INT8) share: the tile configuration's layout and the prefetch of the bytes the
// next tiles are built from. Internal to src/kernels.
#pragma once
#include "kernels/amx_gemm.h"
#include "kernels/isa_namespace.h"

#ifdef MLA_AMX
#include <immintrin.h>

#include <cstdint>

namespace MLASERVE_KERNELS_NS::amx {

constexpr int64_t kTileRows = 16;  // tokens (A, C) or column pairs / 4-column groups (B) in a tile

// LDTILECFG's 64-byte operand (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// LDTILECFG of `config` on the calling thread.
void load_tile_config(const TileConfig& config);

// The bytes the next B tiles are built from, fetched into L2 a few lines a tile step while the
// current tiles' products run: building them otherwise waits on memory with the tile unit idle
// (an expert's ~48 tokens of a 512-token prefill compute a BF16 panel pair in about the time
// its 128 KB take to read). `rows` spans of row_bytes, row_stride apart.
struct NextTilesPrefetch {
  const char* row = nullptr;
  int64_t row_bytes = 0, row_stride = 0, rows = 0, offset = 0, lines_per_step = 0;

  void step() {
    for (int64_t i = 0; i < lines_per_step && rows > 0; ++i) {
      _mm_prefetch(row + offset, _MM_HINT_T1);
      offset += 64;
      if (offset >= row_bytes) offset = 0, row += row_stride, --rows;
    }
  }
};

// `rows` spans of row_bytes from `first`, row_stride apart, spread over `tile_steps` steps.
NextTilesPrefetch spread_prefetch(const char* first, int64_t row_bytes, int64_t row_stride, int64_t rows,
                                  int64_t tile_steps);

}  // namespace MLASERVE_KERNELS_NS::amx
#endif
