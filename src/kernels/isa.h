// The builds of the kernels one binary carries, one per instruction-set level, as llama.cpp's
// CPU variants: the code above the kernels is compiled for x86-64-v3 (AVX2, FMA, F16C, BMI2),
// and the kernels once more for each level below (isa_namespace.h). At start-up the process
// takes the best build its CPU runs, or the one MLASERVE_ISA names (the start-up log says
// which); dispatch.cc forwards the kernel entry points to it.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "kernels/attention.h"
#include "kernels/mla_decode.h"
#include "kernels/weight.h"

namespace mlaserve {

enum class Isa {
  Avx2,    // x86-64-v3: AVX2, FMA, F16C, BMI2 (Haswell, Zen 1 and later)
  Avx512,  // x86-64-v4 with AVX512_BF16 and AVX512_VNNI (Zen 4, Cooper Lake, Sapphire Rapids and
           // later), AMX tiles used where the CPU and kernel grant them
};
inline constexpr Isa kIsas[] = {Isa::Avx2, Isa::Avx512};

// What one build of the kernels offers, and its entry points (isa_kernels.cc fills one a build).
// Only a build host_runs may be touched: its code, even its table's initialisation, may use
// instructions other CPUs lack.
struct IsaKernels {
  const char* units;                // the vector units it compiles for, for the start-up log
  bool bf16_dot;                    // vdpbf16ps (AVX512_BF16)
  bool four_bit_panels;             // the 4-bit panel kernels
  bool amx;                         // the AMX tile kernels (they run where amx_available() also says so)
  int64_t bf16_panel_few_tokens;    // the most tokens the BF16 panel stream takes
  int64_t block_scaled_max_tokens;  // the most tokens the block-scaled dots take
  bool (*amx_available)();          // built, and the kernel grants this process the tiles
  bool (*mla_amx_tiles_take)(const MlaAbsorbedParams& params);

  // The entry points the code above calls (linear.h, mla_decode.h, attention.h, kda.h, dequantize.h,
  // peak_probes.h).
  void (*linear)(const LinearWeight& weight, const float* x, int64_t n_tokens, float* y);
  void (*linear_rows)(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* x, int64_t x_stride,
                      int64_t n_tokens, float* y, int64_t y_stride);
  void (*linear_transposed_rows)(const LinearWeight& weight, int64_t row_begin, int64_t row_end, const float* coef,
                                 int64_t coef_stride, int64_t n_tokens, float* y, int64_t y_stride);
  void (*mla_absorbed_attention)(std::span<const MlaAbsorbedParams> batch, std::span<const ByteRange> read_next);
  void (*causal_attention)(const CausalAttentionParams& params);
  void (*softmax_in_place)(float* p, int64_t n);
  void (*kda_recurrent_step)(float* state, const float* q, const float* k, const float* v, const float* g, float beta,
                             int64_t key_dim, int64_t value_dim, float* out);
  void (*kda_chunked)(float* state, const float* q, const float* k, const float* v, const float* g, const float* beta,
                      int64_t n_tokens, int64_t stride, int64_t beta_stride, int64_t dim, int64_t chunk, float* out);
  void (*l2_normalize)(float* x, int64_t n, float scale);
  void (*dequantize_row)(const LinearWeight& weight, int64_t row, float* out);
  void (*dequantize_row_range)(const LinearWeight& weight, int64_t row, int64_t col_begin, int64_t col_end, float* out);
  double (*fma_chains)(int64_t iterations);  // peak_probes.h
  double (*bf16_dot_chains)(int64_t iterations);
  double (*int8_dot_chains)(int64_t iterations);
};

// The build of the kernels for `isa`; each build defines its own (isa_kernels.cc).
const IsaKernels& isa_kernels(Isa isa);
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();

// Whether this CPU (and its operating system) runs the build for `isa`.
bool host_runs(Isa isa);

// The build this process runs: MLASERVE_ISA if set (throws if unknown, or if this CPU cannot run
// it), else the best one host_runs.
Isa process_isa();

// MLASERVE_ISA's name for a build ("avx2"), and what a CPU needs to run it.
const char* isa_name(Isa isa);
const char* isa_requirements(Isa isa);
// "avx2" -> Isa::Avx2; throws naming the builds for an unknown name.
Isa isa_from_name(const std::string& name);

}  // namespace mlaserve
