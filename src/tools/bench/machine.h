// This machine's limits, measured in the same run as a model benchmark: memory bandwidth
// (STREAM-like triad over arrays far larger than the caches, all threads), read bandwidth
// (as decode reads weights: each thread's share as 4 streams at once, nothing written) and
// peak fp32 FMA rate (independent FMA chains in registers, all threads) and, where the build
// has AVX512_BF16, the peak rate of its bf16 dot (vdpbf16ps, the same way).
#pragma once

#include "tools/plan/hardware.h"

namespace mlaserve {

double measure_triad_bandwidth_gb_s(int repetitions = 5);  // best of repetitions
double measure_read_bandwidth_gb_s(int repetitions = 5);   // best of repetitions
double measure_peak_fma_gflops(int repetitions = 5);       // best of repetitions
double measure_peak_bf16_dot_gflops(int repetitions = 5);  // best of repetitions; 0 without AVX512_BF16
double measure_peak_int8_dot_gops(int repetitions = 5);    // best of repetitions; 0 without AVX512_VNNI
double measure_dispatch_us();  // median round trip of an empty parallel_for over the pool's threads

// The planner's catalog entry for this machine (`plan --hardware this-cpu`), from the probes:
// the read bandwidth as decode streams weights, the fp32 FMA peak (BF16 weights are computed on
// fp32 FMAs), the int8 dot peak as fp8_tflops (INT8 and 4-bit weights compute on int8
// products), one parallel_for round trip as the fixed cost of a kernel, and its memory.
Hardware this_cpu_hardware();

}  // namespace mlaserve
