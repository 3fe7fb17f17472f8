// This machine's limits, measured in the same run as a model benchmark: memory bandwidth
// (STREAM-like triad over arrays far larger than the caches, all threads) and peak fp32 FMA
// rate (independent FMA chains in registers, all threads).
#pragma once

namespace mlaserve {

double measure_triad_bandwidth_gb_s(int repetitions = 5);  // best of repetitions
double measure_peak_fma_gflops(int repetitions = 5);       // best of repetitions

}  // namespace mlaserve
