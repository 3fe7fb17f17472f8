#include "tools/bench/machine.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "base/huge_pages.h"
#include "base/thread_pool.h"
#include "kernels/peak_probes.h"
#include "kernels/simd.h"

namespace mlaserve {
namespace {

double seconds(const std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The best over repetitions of `chains` run on every thread of the pool at once, in GFLOP/s.
double measure_chains_gflops(double (*chains)(int64_t), int repetitions) {
  ThreadPool& pool = thread_pool();
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    std::vector<double> flops(size_t(pool.size()), 0.0);
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(pool.size(), [&](int64_t begin, int64_t end, int worker) {
      for (int64_t i = begin; i < end; ++i) flops[size_t(worker)] += chains(20'000'000);
    });
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / seconds(start) / 1e9);
  }
  return best;
}

}  // namespace

double measure_triad_bandwidth_gb_s(int repetitions) {
  constexpr size_t kFloats = size_t(64) << 20;  // 256 MiB per array: far beyond any cache
  // On huge pages, as the weights decode streams are.
  const auto a = allocate_huge_pages<float>(kFloats), b = allocate_huge_pages<float>(kFloats),
             c = allocate_huge_pages<float>(kFloats);
  ThreadPool& pool = thread_pool();
  auto triad = [&](float scale) {
    pool.parallel_for(
        int64_t(kFloats),
        [&](int64_t begin, int64_t end, int) {
          for (int64_t i = begin; i < end; ++i) a[i] = b[i] + scale * c[i];
        },
        4096);
  };
  pool.parallel_for(
      int64_t(kFloats),
      [&](int64_t begin, int64_t end, int) {  // first touch, per thread
        for (int64_t i = begin; i < end; ++i) a[i] = 0, b[i] = 1, c[i] = 2;
      },
      4096);
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    triad(0.5f + float(r));
    best = std::max(best, 3.0 * double(kFloats) * sizeof(float) / seconds(start) / 1e9);
  }
  return best;
}

double measure_read_bandwidth_gb_s(int repetitions) {
  constexpr size_t kFloats = size_t(128) << 20;  // 512 MiB: far beyond any cache
  const auto data = allocate_huge_pages<float>(kFloats);
  ThreadPool& pool = thread_pool();
  constexpr int64_t kGrain = 4 * 4096;
  pool.parallel_for(
      int64_t(kFloats),
      [&](int64_t begin, int64_t end, int) {  // first touch, per thread
        for (int64_t i = begin; i < end; ++i) data[size_t(i)] = 1.0f;
      },
      kGrain);
  std::vector<float> sums(size_t(pool.size()));
  double best = 0;
  for (int r = 0; r < repetitions; ++r) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(
        int64_t(kFloats),
        [&](int64_t begin, int64_t end, int worker) {
          // 4 quarters of the share at once, as the linear kernels read spread quads of rows.
          const float* quarters[4];
          const int64_t quarter = (end - begin) / 4;
          for (int k = 0; k < 4; ++k) quarters[k] = data.get() + begin + k * quarter;
          float sum = 0.0f;
          int64_t i = 0;
#if defined(__AVX2__)
          __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
          for (; i + 8 <= quarter; i += 8)
            for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(quarters[k] + i));
          sum = simd::hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
#endif
          for (; i < quarter; ++i)
            for (int k = 0; k < 4; ++k) sum += quarters[k][i];
          sums[size_t(worker)] = sum;
        },
        kGrain);
    best = std::max(best, double(kFloats) * sizeof(float) / seconds(start) / 1e9);
  }
  volatile float keep = sums[0];
  (void)keep;
  return best;
}

double measure_peak_fma_gflops(int repetitions) { return measure_chains_gflops(fma_chains, repetitions); }

double measure_peak_bf16_dot_gflops(int repetitions) { return measure_chains_gflops(bf16_dot_chains, repetitions); }

double measure_peak_int8_dot_gops(int repetitions) { return measure_chains_gflops(int8_dot_chains, repetitions); }

double measure_dispatch_us() {
  ThreadPool& pool = thread_pool();
  std::vector<double> samples;
  for (int i = 0; i < 2001; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(pool.size(), [](int64_t, int64_t, int) {});
    samples.push_back(seconds(start) * 1e6);
  }
  std::nth_element(samples.begin(), samples.begin() + 1000, samples.end());
  return samples[1000];
}

Hardware this_cpu_hardware() {
  Hardware hw;
  hw.name = "this-cpu", hw.kind = "cpu", hw.devices_per_node = 1, hw.usable_fraction = 0.8;
  hw.memory_gb = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) / 1e9;
  hw.bandwidth_gb_s = measure_read_bandwidth_gb_s();
  hw.bandwidth_efficiency = 1;  // the probe measures what streaming reads reach
  hw.bf16_tflops = measure_peak_fma_gflops() / 1e3;
  hw.fp8_tflops = measure_peak_int8_dot_gops() / 1e3;
  hw.flops_efficiency = hw.expert_flops_efficiency = hw.attention_efficiency = 0.6;
  hw.kernel_overhead_us = measure_dispatch_us();
  hw.note = fmt::format(
      "this machine, probed: {} threads, read {:.1f} GB/s, fp32 FMA {:.0f} GFLOP/s, int8 dot {:.0f} GOP/s, "
      "dispatch {:.1f} us",
      thread_pool().size(), hw.bandwidth_gb_s, hw.bf16_tflops * 1e3, hw.fp8_tflops * 1e3, hw.kernel_overhead_us);
  return hw;
}

}  // namespace mlaserve
