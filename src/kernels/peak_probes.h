// Compute-peak probes (bench-model's machine probe, tools/bench/machine.h): chains of
// independent multiply-adds on the widest vectors this kernel build has, run on the calling
// thread; each returns the FLOPs it did.
#pragma once
#include <cstdint>

#include "kernels/isa_namespace.h"

namespace MLASERVE_KERNELS_NS {

// `iterations` rounds of 12 FMA chains (fp32).
double fma_chains(int64_t iterations);

// `iterations` rounds of 12 vdpbf16ps chains (AVX512_BF16: 16 lanes x 2 bf16 products a lane);
// 0 where the build has no such instruction.
double bf16_dot_chains(int64_t iterations);

// `iterations` rounds of 12 vpdpbusd chains (AVX512_VNNI: 16 lanes x 4 int8 products a lane,
// what 4-bit and INT8 weights compute on); 0 where the build has no such instruction.
double int8_dot_chains(int64_t iterations);

}  // namespace MLASERVE_KERNELS_NS
