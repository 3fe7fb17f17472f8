// run_kernel_build ISA PROGRAM [ARGS...]: runs PROGRAM (code compiled as kernel build ISA) where
// this CPU runs that build, else exits 77 (CTest's skip) without starting it: such code may use
// instructions this CPU lacks from its first static initialiser on.
#include <unistd.h>

#include <cstdio>

#include "kernels/isa.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: run_kernel_build ISA PROGRAM [ARGS...]\n");
    return 2;
  }
  const mlaserve::Isa isa = mlaserve::isa_from_name(argv[1]);
  if (!mlaserve::host_runs(isa)) {
    std::printf("skipped: this CPU cannot run the %s build (it needs %s)\n", argv[1], mlaserve::isa_requirements(isa));
    return 77;
  }
  execv(argv[2], argv + 2);
  std::perror(argv[2]);
  return 2;
}
