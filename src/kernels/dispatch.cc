#include "kernels/dispatch.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "kernels/amx_gemm.h"
#include "kernels/bf16_dot_gemm.h"
#include "kernels/bf16_panel_decode.h"
#include "kernels/block_scaled_dot.h"
#include "kernels/four_bit_panels.h"
#include "kernels/gemm_4bit.h"
#include "kernels/linear.h"
#include "kernels/packed_gemm.h"
#include "kernels/row_dots.h"

namespace mlaserve {
namespace {

// Token counts where linear layers change kernel (docs/kernels.md describes the kernels;
// linear_bench measures both sides of each):
// - the tile unit takes BF16 panels, FP8 and INT8 from 16 tokens, row-major BF16 where the
//   packed GEMM would: below 16 every kernel gives a token the same bits alone and in a batch,
//   and the tiles sum in their own order;
constexpr int64_t kAmxMinTokens = 16;
// - the packed GEMM takes BF16 and F32 rows from 64 (the 4 x 3 dot blocks are as fast below),
//   FP8 and INT8 from 16 (just past their fused dots);
constexpr int64_t kPackedGemmMinTokens = 64;
constexpr int64_t kBlockScaledPackedGemmMinTokens = 16;
// - 4-bit rows take the integer GEMM from 16 (the int8 dots fall behind it there).
constexpr int64_t kIntegerGemmMinTokens = 16;
// KDA runs shorter than this take the recurrence even with chunking on.
constexpr int64_t kKdaChunkedMinTokens = 16;
constexpr int kExactBf16Terms = 3;  // bf16 terms that hold an fp32 activation exactly

KernelConfig& process_config() {
  static KernelConfig config = host_kernel_config();
  return config;
}

bool bf16_dot_runs(const KernelConfig& config) {
  return config.bf16_dot && !config.amx && config.bf16_activation_terms == 1;
}

LinearKernel choose_bf16_panel_kernel(int64_t n_tokens, const KernelConfig& config) {
  if (n_tokens > 1 && bf16_dot_runs(config)) return LinearKernel::Bf16Dot;
  if (n_tokens <= kBf16PanelFewTokens) return LinearKernel::Bf16PanelStream;
  if (n_tokens >= kAmxMinTokens && config.amx) return LinearKernel::AmxTiles;
  return LinearKernel::Bf16PanelGemm;
}

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

KernelConfig host_kernel_config(int bf16_activation_terms, MlaDecodeKernel mla_decode, int64_t kda_chunk) {
  MLA_CHECK(bf16_activation_terms >= 1 && bf16_activation_terms <= kExactBf16Terms,
            "--bf16-terms must be 1, 2 or 3, got {}", bf16_activation_terms);
  MLA_CHECK(kda_chunk >= 0, "--kda-chunk must be 0 (recurrent prefill) or a chunk size, got {}", kda_chunk);
  const char* amx_setting = std::getenv("MLASERVE_AMX");
  KernelConfig config;
  config.amx = amx_available() && !(amx_setting && std::strcmp(amx_setting, "0") == 0);
  config.bf16_dot = bf16_dot_gemm_built();
  config.four_bit_panels = four_bit_panels_built();
  config.bf16_activation_terms = bf16_activation_terms;
  config.mla_decode = mla_decode;
  config.kda_chunk = kda_chunk;
  return config;
}

const KernelConfig& kernel_config() { return process_config(); }
void use_kernel_config(const KernelConfig& config) { process_config() = config; }

const char* linear_kernel_name(LinearKernel kernel) {
  switch (kernel) {
    case LinearKernel::OneTokenDots: return "one-token dots";
    case LinearKernel::FewTokenDots: return "few-token dots";
    case LinearKernel::BlockScaledDots: return "block-scaled dots";
    case LinearKernel::Q8Dots: return "int8 dots";
    case LinearKernel::IntegerGemm: return "integer GEMM";
    case LinearKernel::IntegerGemmAmx: return "integer GEMM on AMX";
    case LinearKernel::FourBitPanelDots: return "4-bit panel dots";
    case LinearKernel::PackedGemm: return "packed GEMM";
    case LinearKernel::Bf16PanelStream: return "BF16 panel stream";
    case LinearKernel::Bf16PanelGemm: return "BF16 panel GEMM";
    case LinearKernel::Bf16Dot: return "vdpbf16ps";
    case LinearKernel::AmxTiles: return "AMX tiles";
  }
  return "?";
}

LinearKernel choose_linear_kernel(const LinearWeight& weight, int64_t n_tokens, const KernelConfig& config) {
  if (weight.format == WeightFormat::Bf16Panels) return choose_bf16_panel_kernel(n_tokens, config);
  if (is_4bit_panels(weight.format))
    return n_tokens <= kFourBitPanelMaxTokens ? LinearKernel::FourBitPanelDots : LinearKernel::IntegerGemm;
  const bool q8 = takes_q8_activations(weight), block_scaled = is_block_scaled(weight.format);
  if (q8 && n_tokens >= kIntegerGemmMinTokens)
    return config.amx ? LinearKernel::IntegerGemmAmx : LinearKernel::IntegerGemm;
  const int64_t amx_min_tokens = block_scaled ? kAmxMinTokens : kPackedGemmMinTokens;
  if (n_tokens >= amx_min_tokens && config.amx && amx_supports(weight)) return LinearKernel::AmxTiles;
  const int64_t packed_min_tokens = block_scaled ? kBlockScaledPackedGemmMinTokens : kPackedGemmMinTokens;
  if (n_tokens >= packed_min_tokens && packed_gemm_supports(weight)) return LinearKernel::PackedGemm;
  if (q8) return LinearKernel::Q8Dots;
  if (block_scaled && n_tokens <= block_scaled_max_tokens()) return LinearKernel::BlockScaledDots;
  return n_tokens == 1 ? LinearKernel::OneTokenDots : LinearKernel::FewTokenDots;
}

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

// Cost model, per cached row, in units of one head's dot products over it (~1 row of compute):
// generic reads the row twice per head (score, then accumulate) and computes each head once;
// padded reads it once per block of 16 and computes every padded head. Streaming a row from
// beyond L1 costs about as much as one head's compute on it (576 bf16 values; mla_decode_bench),
// so generic costs 3 per head and padded 1 per padded head plus 1 per block: 12 heads -> 36 vs
// 17 (padded); only 1 head (4 padded: 5 vs 3) runs generic.
MlaDecodeKernel choose_mla_decode_kernel(int64_t n_heads, const KernelConfig& config) {
  if (mla_blocked_supports(n_heads)) return MlaDecodeKernel::Blocked;
  if (config.mla_decode == MlaDecodeKernel::Padded || config.mla_decode == MlaDecodeKernel::Generic)
    return config.mla_decode;
  const int64_t padded_heads = mla_padded_heads(n_heads);
  const int64_t padded_cost = padded_heads + (padded_heads + 15) / 16, generic_cost = 3 * n_heads;
  return padded_cost <= generic_cost ? MlaDecodeKernel::Padded : MlaDecodeKernel::Generic;
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

void mla_absorbed_attention(const MlaAbsorbedParams& params) { mla_absorbed_attention(std::span(&params, 1)); }

bool mla_absorbed_on_tiles(int64_t n_heads, int64_t kv_lora_rank, int64_t qk_rope_head_dim, CacheDType cache_dtype,
                           const KernelConfig& config) {
  const MlaDecodeKernel kernel = choose_mla_decode_kernel(n_heads, config);
  const int64_t heads = kernel == MlaDecodeKernel::Blocked  ? n_heads
                        : kernel == MlaDecodeKernel::Padded ? mla_padded_heads(n_heads)
                                                            : 0;
  MlaAbsorbedParams params;
  params.cache.dtype = cache_dtype;
  params.kv_lora_rank = kv_lora_rank;
  params.qk_rope_head_dim = qk_rope_head_dim;
  return config.amx && heads > 0 && heads % 16 == 0 && mla_amx_tiles_take(params);
}

int64_t kda_chunk_tokens(int64_t n_tokens, const KernelConfig& config) {
  return n_tokens >= kKdaChunkedMinTokens ? config.kda_chunk : 0;
}

bool repacks_4bit_panels(const KernelConfig& config) { return config.four_bit_panels && !config.amx; }

bool prefill_attention_on_bf16_dot(const KernelConfig& config) { return bf16_dot_runs(config); }

std::string kernel_features(const KernelConfig& config) {
#if defined(__AVX512F__)
  std::string features = "AVX-512";
#if defined(__AVX512BF16__) && defined(__AVX512VNNI__)
  features += " (BF16, VNNI)";
#endif
#elif defined(__AVX2__) && defined(__FMA__)
  std::string features = "AVX2+FMA";
#else
  std::string features = "scalar (no AVX2: built without -march=native or for another CPU)";
#endif
  if (config.amx)
    features += fmt::format(", AMX tiles for GEMMs of {}+ tokens, activations as {} bf16 term(s) (--bf16-terms; "
                            "MLASERVE_AMX=0 turns the tiles off)",
                            kAmxMinTokens, config.bf16_activation_terms);
  else if (bf16_dot_runs(config))
    features += ", vdpbf16ps for BF16 panels of 2+ tokens, activations rounded to bf16 (--bf16-terms 1)";
  return features;
}

}  // namespace mlaserve
