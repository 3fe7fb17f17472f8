#include "kernels/isa.h"

#include <cstdlib>

#include "base/error.h"

namespace mlaserve {

const IsaKernels& isa_kernels(Isa isa) { return isa == Isa::Avx512 ? avx512_kernels() : avx2_kernels(); }

const char* isa_name(Isa isa) { return isa == Isa::Avx512 ? "avx512" : "avx2"; }

const char* isa_requirements(Isa isa) {
  return isa == Isa::Avx512 ? "x86-64-v4 (AVX-512 F, BW, DQ, VL, CD) with AVX512_BF16 and AVX512_VNNI"
                            : "x86-64-v3 (AVX2, FMA, F16C, BMI2)";
}

bool host_runs(Isa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
  if (isa == Isa::Avx2) return avx2;
  return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512bf16") &&
         __builtin_cpu_supports("avx512vnni");
}

Isa isa_from_name(const std::string& name) {
  for (Isa isa : kIsas)
    if (name == isa_name(isa)) return isa;
  fail("unknown kernel build '{}' (MLASERVE_ISA: avx2 or avx512)", name);
}

Isa process_isa() {
  if (const char* name = std::getenv("MLASERVE_ISA"); name && *name) {
    const Isa isa = isa_from_name(name);
    MLA_CHECK(host_runs(isa), "MLASERVE_ISA={}: this CPU cannot run that build, which needs {}", name,
              isa_requirements(isa));
    return isa;
  }
  MLA_CHECK(host_runs(Isa::Avx2), "this CPU cannot run mlaserve, which needs {}", isa_requirements(Isa::Avx2));
  return host_runs(Isa::Avx512) ? Isa::Avx512 : Isa::Avx2;
}

}  // namespace mlaserve
