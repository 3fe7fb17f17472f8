// BF16 panels against many tokens on Intel AMX (Sapphire Rapids and later): the tile unit
// multiplies 16 x 32 bf16 by 32 x 16 bf16 into 16 x 16 fp32 in one instruction, about 15x the
// fp32 FMA rate of the same core. The weights are bf16 already; the activations are split into
// three bf16 terms by default, x = hi + mid + lo (each the bf16 rounding of what the previous
// left), which represents every fp32 x exactly (8 + 8 + 8 significand bits), so the products are
// those of an fp32 GEMM summed in another order (the "bf16x3" of oneDNN and cuBLAS's 3xTF32);
// fewer terms (KernelConfig::bf16_activation_terms) trade bits of x for tile products.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"
#include "kernels/weight.h"
#include "kernels/quant_dot.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AMX_INT8__) && defined(__AVX512BF16__) && \
    defined(__AVX512BW__)
#define MLA_AMX 1
#endif

namespace MLASERVE_KERNELS_NS {

// Whether the AMX kernels can run: built with AMX-BF16 and AMX-INT8 (the avx512 build) and the
// kernel granted this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once;
// refused where the CPU has no AMX).
bool amx_available();
// Whether this build has the AMX kernels.
bool amx_built();

// y[t * y_stride + (r - row_begin)] = sum_c x[t * x_stride + c] * W[r, c] for r in
// [row_begin, row_end) and t < n_tokens, on the calling thread, W a weight amx_supports (dispatch.h). Each
// token's outputs depend on its own activations only (the same bits in any batch). Activations
// split into activation_terms bf16 terms (3: exact products).
void linear_rows_amx(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                     int64_t n_tokens, float* y, int64_t y_stride, int activation_terms = 3);

// The 4-bit formats' integer GEMM (gemm_4bit.h) on AMX-INT8: per 32-column block, 16 tokens'
// int8 activations times 16 rows' codes as signed int8 (INT4: value; MXFP4: twice the E2M1
// value) in one tdpbssd, the exact int32 sums then scaled by the token's and the row's block
// scales and added in fp32, block after block. The same arguments and the same integer sums as
// gemm_4bit_q8_rows; each token's outputs depend on its own activations only.
void gemm_4bit_q8_rows_amx(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const Q8Buffer& x,
                           int64_t n_tokens, float* y, int64_t y_stride);

#ifdef MLA_AMX
// Configures the calling thread's eight tiles as 16 rows of 64 bytes, the one shape every AMX
// kernel here uses; _tile_release() frees them. Needs amx_available().
void amx_configure_tiles();
#endif

}  // namespace MLASERVE_KERNELS_NS
