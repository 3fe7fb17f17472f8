// main() of the kernel tests compiled as one kernel build (MLASERVE_KERNEL_ISA): its tests call
// that build's kernels directly, and the process runs it too (MLASERVE_ISA), so the entry points
// the tests reach through dispatch.h and the code above the kernels run the same build.
// run_kernel_build starts it only on a CPU that runs the build.
#include <gtest/gtest.h>

#include <cstdlib>

#include "kernels/isa_namespace.h"

int main(int argc, char** argv) {
  setenv("MLASERVE_ISA", MLASERVE_KERNEL_ISA_NAME, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
