// One build's entry points (compiled once per instruction-set level, isa.h): the linear layer
// and the MLA decode on the kernels dispatch.h chooses, and the table dispatch.cc forwards to.
#include "kernels/isa.h"

#include "base/thread_pool.h"
#include "kernels/amx_gemm.h"
#include "kernels/bf16_dot_gemm.h"
#include "kernels/bf16_panel_decode.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/dequantize.h"
#include "kernels/dispatch.h"
#include "kernels/four_bit_panels.h"
#include "kernels/gemm_4bit.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/packed_gemm.h"
#include "kernels/peak_probes.h"
#include "kernels/row_dots.h"
#include "kernels/simd.h"

#if !defined(MLASERVE_KERNEL_ISA)
#error "isa_kernels.cc is compiled once per kernel build, with MLASERVE_KERNEL_ISA set"
#endif
// avx512 -> avx512_kernels (isa.h declares one a build).
#define MLASERVE_KERNELS_OF(isa) MLASERVE_KERNELS_OF_(isa)
#define MLASERVE_KERNELS_OF_(isa) isa##_kernels

namespace MLASERVE_KERNELS_NS {
namespace {

void run_linear_kernel(LinearKernel kernel, const LinearWeight& weight, int64_t row_begin, int64_t row_end,
                       const float* x, int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride,
                       const KernelConfig& config) {
  const auto q8 = [&] { return quantized_q8(x, x_stride, n_tokens, weight.cols); };
  switch (kernel) {
    case LinearKernel::OneTokenDots: return one_token_dot_rows(weight, row_begin, row_end, x, y);
    case LinearKernel::FewTokenDots:
      return few_token_dot_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::BlockScaledDots:
      return block_scaled_dot_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::Q8Dots: return q8_dot_rows(weight, row_begin, row_end, q8(), n_tokens, y, y_stride);
    case LinearKernel::IntegerGemm: return gemm_4bit_q8_rows(weight, row_begin, row_end, q8(), n_tokens, y, y_stride);
    case LinearKernel::IntegerGemmAmx:
      return gemm_4bit_q8_rows_amx(weight, row_begin, row_end, q8(), n_tokens, y, y_stride);
    case LinearKernel::FourBitPanelDots:
      return four_bit_panel_rows(weight, row_begin, row_end, q8(), n_tokens, y, y_stride);
    case LinearKernel::PackedGemm:
      return packed_gemm_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::Bf16PanelStream:
      return bf16_panel_few_token_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::Bf16PanelGemm:
      return bf16_panel_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::Bf16Dot:
      return bf16_dot_panel_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
    case LinearKernel::AmxTiles:
      return linear_rows_amx(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride,
                             config.bf16_activation_terms);
  }
}

}  // namespace

void linear_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride) {
  const KernelConfig& config = kernel_config();
  run_linear_kernel(choose_linear_kernel(weight, n_tokens, config), weight, row_begin, row_end, x, x_stride, n_tokens,
                    y, y_stride, config);
}

void linear(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y) {
  if (n_tokens <= 0) return;
  const KernelConfig& config = kernel_config();
  const LinearKernel kernel = choose_linear_kernel(weight, n_tokens, config);
  thread_pool().parallel_for(
      weight.rows,
      [&](int64_t begin, int64_t end, int) {
        run_linear_kernel(kernel, weight, begin, end, x, weight.cols, n_tokens, y + begin, weight.rows, config);
      },
      8);
}

void mla_absorbed_attention(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next) {
  if (batch.empty()) return;
  const KernelConfig& config = kernel_config();
  switch (choose_mla_decode_kernel(batch[0].n_heads, config)) {
    case MlaDecodeKernel::Blocked: return mla_absorbed_blocked(batch, read_next, config.amx);
    case MlaDecodeKernel::Padded: return mla_absorbed_padded(batch, read_next, config.amx);
    default:
      for (const auto& params : batch) mla_absorbed_generic(params);
  }
}

}  // namespace MLASERVE_KERNELS_NS

namespace mlaserve {

const IsaKernels& MLASERVE_KERNELS_OF(MLASERVE_KERNEL_ISA)() {
  static const IsaKernels kernels{
      .units = simd::kUnits,
      .bf16_dot = bf16_dot_gemm_built(),
      .four_bit_panels = four_bit_panels_built(),
      .amx = amx_built(),
      .bf16_panel_few_tokens = kBf16PanelFewTokens,
      .block_scaled_max_tokens = block_scaled_max_tokens(),
      .amx_available = &amx_available,
      .mla_amx_tiles_take = &mla_amx_tiles_take,
      .linear = &linear,
      .linear_rows = &linear_rows,
      .linear_transposed_rows = &linear_transposed_rows,
      .mla_absorbed_attention = &mla_absorbed_attention,
      .causal_attention = &causal_attention,
      .softmax_in_place = &softmax_in_place,
      .kda_recurrent_step = &kda_recurrent_step,
      .kda_chunked = &kda_chunked,
      .l2_normalize = &l2_normalize,
      .dequantize_row = &dequantize_row,
      .dequantize_row_range = &dequantize_row_range,
      .fma_chains = &fma_chains,
      .bf16_dot_chains = &bf16_dot_chains,
      .int8_dot_chains = &int8_dot_chains,
  };
  return kernels;
}

}  // namespace mlaserve
