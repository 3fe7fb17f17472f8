// The one place that chooses kernels: for a linear layer by weight format, token count and
// what the host offers; for MLA decode by head count. Every threshold between kernels is here,
// and the choice reads one KernelConfig, built at start-up from the CPU and the command line.
// Leaf kernels take what they need as arguments and never choose for one another.
// docs/kernels.md shows the table choose_linear_kernel implements. dispatch.cc also defines the
// ISA-neutral kernel entry points the code above calls, which run the process's build (isa.h).
#pragma once
#include <cstdint>
#include <string>

#include "kernels/isa.h"
#include "kernels/mla_decode.h"
#include "kernels/weight.h"

namespace mlaserve {

// What the kernels may use: the host's units (as built and granted) and the options that trade
// exactness or memory for speed.
struct KernelConfig {
  Isa isa = Isa::Avx2;                  // the build of the kernels that runs (isa.h)
  bool amx = false;                     // AMX tiles: built with AMX, granted by the kernel, MLASERVE_AMX not 0
  bool bf16_dot = false;                // vdpbf16ps built (AVX512_BF16)
  bool four_bit_panels = false;         // the 4-bit panel kernels built (AVX2 + FMA, or AVX-512 VNNI)
  int64_t bf16_panel_few_tokens = 3;    // the most tokens the build's BF16 panel stream takes
  int64_t block_scaled_max_tokens = 1;  // the most tokens the build's block-scaled dots take
  // The bf16 terms GEMMs that multiply in bf16 split each activation into (--bf16-terms): x = hi
  // + mid + lo, each the bf16 rounding of what the terms before it left. 3 hold all of fp32's 24
  // significand bits (exact products), 2 keep 16, 1 rounds x to bf16 (as llama.cpp's and
  // SGLang's bf16 GEMMs do). AMX GEMMs take them all; without AMX, 1 sends BF16 panels of 2+
  // tokens and the prefill attention to vdpbf16ps, and 2 and 3 keep the exact fp32 kernels.
  int bf16_activation_terms = 3;
  // MLA decode for head counts the blocked kernel does not take natively (--mla-kernel).
  MlaDecodeKernel mla_decode = MlaDecodeKernel::Auto;
  // KDA prefill (--kda-chunk): runs of 16+ tokens in the chunked form, chunks of this many
  // tokens; 0 runs the recurrence everywhere.
  int64_t kda_chunk = 64;
};

// The build `isa` (one this host runs) with the given options; throws on options out of range.
KernelConfig host_kernel_config(Isa isa, int bf16_activation_terms = 3,
                                MlaDecodeKernel mla_decode = MlaDecodeKernel::Auto, int64_t kda_chunk = 64);
// The same for the build this process runs (process_isa: the best, or MLASERVE_ISA's).
KernelConfig host_kernel_config(int bf16_activation_terms = 3, MlaDecodeKernel mla_decode = MlaDecodeKernel::Auto,
                                int64_t kda_chunk = 64);

// The process's config: host_kernel_config() until use_kernel_config replaces it, once at
// start-up before any kernel runs (and by tests and benchmarks, between kernel calls). The
// kernel entry points (linear.h, mla_decode.h, attention.h, kda.h, dequantize.h) run its build.
const KernelConfig& kernel_config();
void use_kernel_config(const KernelConfig& config);

// Uses a config for a scope, then restores the one before (tests and benchmarks).
class ScopedKernelConfig {
 public:
  explicit ScopedKernelConfig(const KernelConfig& config) : saved_(kernel_config()) { use_kernel_config(config); }
  ~ScopedKernelConfig() { use_kernel_config(saved_); }
  ScopedKernelConfig(const ScopedKernelConfig&) = delete;
  ScopedKernelConfig& operator=(const ScopedKernelConfig&) = delete;

 private:
  KernelConfig saved_;
};

// The kernels a linear layer can run on (docs/kernels.md describes each).
enum class LinearKernel {
  OneTokenDots,      // one token, rows read once in spread quads (row_dots.h)
  FewTokenDots,      // 4 rows x 3 tokens blocks, rows dequantized to fp32 first where not BF16/F32
  BlockScaledDots,   // FP8 / INT8 codes widened in registers (block_scaled_dot.h)
  Q8Dots,            // 4-bit rows against int8 activations (quant_dot.h)
  IntegerGemm,       // 4-bit rows or panels, an integer GEMM on int8 activations (gemm_4bit.h)
  IntegerGemmAmx,    // the same on AMX-INT8 tiles
  FourBitPanelDots,  // 4-bit panels against a few tokens (four_bit_panels.h)
  PackedGemm,        // any format decoded to fp32 panels once per panel (packed_gemm.h)
  Bf16PanelStream,   // BF16 panels streamed once for a few tokens (bf16_panel_decode.h)
  Bf16PanelGemm,     // BF16 panels as the packed GEMM's panels
  Bf16Dot,           // BF16 panels on vdpbf16ps, activations rounded to bf16 (bf16_dot_gemm.h)
  AmxTiles,          // BF16, FP8, INT8 on AMX-BF16 tiles (amx_gemm.h)
};
const char* linear_kernel_name(LinearKernel kernel);

// The kernel linear_rows runs for this weight and token count under `config`.
LinearKernel choose_linear_kernel(const LinearWeight& weight, int64_t n_tokens, const KernelConfig& config);

// What MLA decode runs for n_heads heads (Blocked, Padded or Generic).
MlaDecodeKernel choose_mla_decode_kernel(int64_t n_heads, const KernelConfig& config);

// Whether the absorbed attention of n_heads heads over such a cache runs on the AMX tile unit,
// where its products cost far less than on the vector units (the prefill's form choice weighs it).
bool mla_absorbed_on_tiles(int64_t n_heads, int64_t kv_lora_rank, int64_t qk_rope_head_dim, CacheDType cache_dtype,
                           const KernelConfig& config);

// KDA over a run of n_tokens of one sequence: the chunk size of the chunked form (prefill), or 0
// for the token-by-token recurrence (decode, short runs, --kda-chunk 0).
int64_t kda_chunk_tokens(int64_t n_tokens, const KernelConfig& config);

// Whether loading repacks 4-bit weights into panels (built, and no AMX: its 4-bit GEMM reads rows).
bool repacks_4bit_panels(const KernelConfig& config);

// Whether the expanded prefill attention multiplies on vdpbf16ps (bf16 keys, values, queries).
bool prefill_attention_on_bf16_dot(const KernelConfig& config);

// The build and options in use, for the start-up log: e.g. "avx512 build (AVX-512 with BF16 and
// VNNI), vdpbf16ps for BF16 panels of 2+ tokens ...".
std::string kernel_features(const KernelConfig& config);

}  // namespace mlaserve
