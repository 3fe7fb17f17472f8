// main() of the microbenchmarks compiled as one kernel build (MLASERVE_KERNEL_ISA): the process
// runs that build (MLASERVE_ISA), so the entry points they reach through dispatch.h run it too.
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "kernels/isa_namespace.h"

int main(int argc, char** argv) {
  setenv("MLASERVE_ISA", MLASERVE_KERNEL_ISA_NAME, 1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
