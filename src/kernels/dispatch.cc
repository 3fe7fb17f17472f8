#include "kernels/dispatch.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/dequantize.h"
#include "kernels/four_bit_panels.h"
#include "kernels/kda.h"
#include "kernels/linear.h"
#include "kernels/peak_probes.h"

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
  if (n_tokens <= config.bf16_panel_few_tokens) return LinearKernel::Bf16PanelStream;
  if (n_tokens >= kAmxMinTokens && config.amx) return LinearKernel::AmxTiles;
  return LinearKernel::Bf16PanelGemm;
}

// The build the process's kernels run.
const IsaKernels& running() { return isa_kernels(kernel_config().isa); }

}  // namespace

KernelConfig host_kernel_config(Isa isa, int bf16_activation_terms, MlaDecodeKernel mla_decode, int64_t kda_chunk) {
  MLA_CHECK(bf16_activation_terms >= 1 && bf16_activation_terms <= kExactBf16Terms,
            "--bf16-terms must be 1, 2 or 3, got {}", bf16_activation_terms);
  MLA_CHECK(kda_chunk >= 0, "--kda-chunk must be 0 (recurrent prefill) or a chunk size, got {}", kda_chunk);
  MLA_CHECK(host_runs(isa), "this CPU cannot run the {} kernels, which need {}", isa_name(isa), isa_requirements(isa));
  const IsaKernels& kernels = isa_kernels(isa);
  const char* amx_setting = std::getenv("MLASERVE_AMX");
  KernelConfig config;
  config.isa = isa;
  config.amx = kernels.amx_available() && !(amx_setting && std::strcmp(amx_setting, "0") == 0);
  config.bf16_dot = kernels.bf16_dot;
  config.four_bit_panels = kernels.four_bit_panels;
  config.bf16_panel_few_tokens = kernels.bf16_panel_few_tokens;
  config.block_scaled_max_tokens = kernels.block_scaled_max_tokens;
  config.bf16_activation_terms = bf16_activation_terms;
  config.mla_decode = mla_decode;
  config.kda_chunk = kda_chunk;
  return config;
}

KernelConfig host_kernel_config(int bf16_activation_terms, MlaDecodeKernel mla_decode, int64_t kda_chunk) {
  return host_kernel_config(process_isa(), bf16_activation_terms, mla_decode, kda_chunk);
}

const KernelConfig& kernel_config() { return process_config(); }

void use_kernel_config(const KernelConfig& config) {
  MLA_CHECK(host_runs(config.isa), "this CPU cannot run the {} kernels", isa_name(config.isa));
  process_config() = config;
}

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
  if (block_scaled && n_tokens <= config.block_scaled_max_tokens) return LinearKernel::BlockScaledDots;
  return n_tokens == 1 ? LinearKernel::OneTokenDots : LinearKernel::FewTokenDots;
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
  return config.amx && heads > 0 && heads % 16 == 0 && isa_kernels(config.isa).mla_amx_tiles_take(params);
}

int64_t kda_chunk_tokens(int64_t n_tokens, const KernelConfig& config) {
  return n_tokens >= kKdaChunkedMinTokens ? config.kda_chunk : 0;
}

bool repacks_4bit_panels(const KernelConfig& config) { return config.four_bit_panels && !config.amx; }

bool prefill_attention_on_bf16_dot(const KernelConfig& config) { return bf16_dot_runs(config); }

std::string kernel_features(const KernelConfig& config) {
  std::string features = fmt::format("{} build ({})", isa_name(config.isa), isa_kernels(config.isa).units);
  if (config.amx)
    features += fmt::format(
        ", AMX tiles for GEMMs of {}+ tokens, activations as {} bf16 term(s) (--bf16-terms; "
        "MLASERVE_AMX=0 turns the tiles off)",
        kAmxMinTokens, config.bf16_activation_terms);
  else if (bf16_dot_runs(config))
    features += ", vdpbf16ps for BF16 panels of 2+ tokens, activations rounded to bf16 (--bf16-terms 1)";
  return features;
}

const char* mla_decode_kernel_name(MlaDecodeKernel kernel) {
  switch (kernel) {
    case MlaDecodeKernel::Auto: return "auto";
    case MlaDecodeKernel::Blocked: return "blocked";
    case MlaDecodeKernel::Padded: return "padded";
    case MlaDecodeKernel::Generic: return "generic";
  }
  return "?";
}

MlaDecodeKernel mla_decode_kernel_from_name(const char* name) {
  for (auto kernel : {MlaDecodeKernel::Auto, MlaDecodeKernel::Padded, MlaDecodeKernel::Generic})
    if (std::strcmp(name, mla_decode_kernel_name(kernel)) == 0) return kernel;
  fail("unknown --mla-kernel '{}' (auto, padded, generic)", name);
}

bool mla_blocked_supports(int64_t n_heads) {
  return n_heads == 4 || n_heads == 8 || (n_heads > 0 && n_heads % 16 == 0);
}

int64_t mla_padded_heads(int64_t n_heads) {
  for (int64_t heads : {4, 8, 16})
    if (n_heads <= heads) return heads;
  return (n_heads + 15) / 16 * 16;
}

// The kernel entry points, on the build the process runs.
void linear(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y) {
  running().linear(weight, x, n_tokens, y);
}

void linear_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                 int64_t n_tokens, float* y, int64_t y_stride) {
  running().linear_rows(weight, row_begin, row_end, x, x_stride, n_tokens, y, y_stride);
}

void linear_transposed_rows(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* coef,
                            int64_t coef_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  running().linear_transposed_rows(weight, row_begin, row_end, coef, coef_stride, n_tokens, y, y_stride);
}

void mla_absorbed_attention(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next) {
  running().mla_absorbed_attention(batch, read_next);
}

void causal_attention(const CausalAttentionParams& params) { running().causal_attention(params); }

void softmax_in_place(float* p, int64_t n) { running().softmax_in_place(p, n); }

void kda_recurrent_step(float* state, const float* q, const float* k, const float* v, const float* g, float beta,
                        int64_t key_dim, int64_t value_dim, float* out) {
  running().kda_recurrent_step(state, q, k, v, g, beta, key_dim, value_dim, out);
}

void kda_chunked(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int64_t n_tokens, int64_t stride, int64_t beta_stride, int64_t dim, int64_t chunk, float* out) {
  running().kda_chunked(state, q, k, v, g, beta, n_tokens, stride, beta_stride, dim, chunk, out);
}

void l2_normalize(float* x, int64_t n, float scale) { running().l2_normalize(x, n, scale); }

void dequantize_row(const LinearWeight& weight, int64_t row, float* out) { running().dequantize_row(weight, row, out); }

void dequantize_row_range(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out) {
  running().dequantize_row_range(weight, row, col_begin, col_end, out);
}

double fma_chains(int64_t iterations) { return running().fma_chains(iterations); }

double bf16_dot_chains(int64_t iterations) { return running().bf16_dot_chains(iterations); }

double int8_dot_chains(int64_t iterations) { return running().int8_dot_chains(iterations); }

}  // namespace mlaserve
