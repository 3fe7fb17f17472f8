// BF16 panels against many tokens on Intel AMX (Sapphire Rapids and later): the tile unit
// multiplies 16 x 32 bf16 by 32 x 16 bf16 into 16 x 16 fp32 in one instruction, about 15x the
// fp32 FMA rate of the same core. The weights are bf16 already; the activations are split into
// three bf16 terms, x = hi + mid + lo (each the bf16 rounding of what the previous left), which
// represents every fp32 x exactly (8 + 8 + 8 significand bits), so the products are those of
// an fp32 GEMM summed in another order (the "bf16x3" of oneDNN and cuBLAS's 3xTF32).
#pragma once
#include <cstdint>

#include "io/linear_weight.h"

namespace mlaserve {

// Whether bf16_panel_rows_amx can run: built with AMX-BF16 (-march=native on such a host) and
// the kernel granted this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool amx_bf16_available();

// From this many tokens bf16_panel_rows takes the AMX kernel where it is available.
constexpr int64_t kAmxMinTokens = 16;

// y[t * y_stride + (r - row_begin)] = sum_c x[t * x_stride + c] * W[r, c] for r in
// [row_begin, row_end) and t < n_tokens, W a Bf16Panels weight, on the calling thread. Each
// token's outputs depend on its own activations only (the same bits in any batch).
void bf16_panel_rows_amx(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x,
                         int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride);

}  // namespace mlaserve
