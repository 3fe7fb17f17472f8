#include "kernels/isa.h"

#include <cpuid.h>

#include <cstdlib>

#include "base/error.h"

namespace mlaserve {

const IsaKernels& isa_kernels(Isa isa) { return isa == Isa::Avx512 ? avx512_kernels() : avx2_kernels(); }

const char* isa_name(Isa isa) { return isa == Isa::Avx512 ? "avx512" : "avx2"; }

const char* isa_requirements(Isa isa) {
  return isa == Isa::Avx512 ? "x86-64-v4 (AVX-512 F, BW, DQ, VL, CD) with AVX512_BF16 and AVX512_VNNI"
                            : "x86-64-v3 (AVX2, FMA, F16C, BMI2)";
}

namespace {

// F16C (CPUID 1: ECX bit 29) and BMI2 (CPUID 7.0: EBX bit 8), read directly: not every compiler's
// __builtin_cpu_supports knows their names.
bool host_has_f16c_and_bmi2() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & bit_F16C)) return false;
  return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & bit_BMI2);
}

}  // namespace

bool host_runs(Isa isa) {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && host_has_f16c_and_bmi2();
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
