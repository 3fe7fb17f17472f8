// The kernels are compiled once per instruction-set level (isa.h). CMake compiles each kernel
// build with MLASERVE_KERNEL_ISA set to its name, which puts what its sources and headers
// declare in an inline namespace of that name (mlaserve::avx512::linear), so the builds link
// side by side in one binary. The code above the kernels includes the same headers without it
// and sees ISA-neutral entry points (mlaserve::linear), which dispatch.cc defines as calls into
// the build this process runs.
#pragma once

#if defined(MLASERVE_KERNEL_ISA)
#define MLASERVE_KERNELS_NS mlaserve::inline MLASERVE_KERNEL_ISA
// The build's name as a string ("avx512"), for code compiled as one build (its tests' main).
#define MLASERVE_KERNEL_ISA_NAME MLASERVE_KERNEL_ISA_STRING_(MLASERVE_KERNEL_ISA)
#define MLASERVE_KERNEL_ISA_STRING_(isa) MLASERVE_KERNEL_ISA_STRING__(isa)  // expands isa first
#define MLASERVE_KERNEL_ISA_STRING__(isa) #isa
#else
#define MLASERVE_KERNELS_NS mlaserve
#endif
