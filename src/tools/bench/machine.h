// This machine's limits, measured in the same run as a model benchmark: memory bandwidth
// (STREAM-like triad over arrays far larger than the caches, all threads), read bandwidth
// (as decode reads weights: each thread's share as 4 streams at once, nothing written) and
// peak fp32 FMA rate (independent FMA chains in registers, all threads) and, where the build
// has AVX512_BF16, the peak rate of its bf16 dot (vdpbf16ps, the same way).
#pragma once

namespace mlaserve {

double measure_triad_bandwidth_gb_s(int repetitions = 5);  // best of repetitions
double measure_read_bandwidth_gb_s(int repetitions = 5);   // best of repetitions
double measure_peak_fma_gflops(int repetitions = 5);       // best of repetitions
double measure_peak_bf16_dot_gflops(int repetitions = 5);  // best of repetitions; 0 without AVX512_BF16

}  // namespace mlaserve
