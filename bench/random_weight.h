// Random weights for the microbenchmarks: each format's bytes drawn once, repacked where the
// loader repacks, and copied so a benchmark can cycle through more than the caches hold.
#pragma once
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "io/linear_weight.h"
#include "kernels/linear.h"

namespace mlaserve::bench {

// Random weights of `format` with their scales, owned here.
struct RandomWeight {
  std::vector<uint8_t> data, scales;
  std::unique_ptr<WeightCopies> repacked = std::make_unique<WeightCopies>();
  LinearWeight weight;

  // int8_group: an INT8 weight's columns a scale (0: one scale a row, per channel).
  RandomWeight(WeightFormat format, int64_t rows, int64_t cols, int64_t int8_group = 0) {
    if (format == WeightFormat::Bf16Panels) {  // BF16 repacked as at load
      const RandomWeight bf16(WeightFormat::BF16, rows, cols);
      weight = repack_bf16_panels(bf16.weight, *repacked);
      return;
    }
    if (is_4bit_panels(format)) {  // INT4 / MXFP4 repacked as at load where the panel kernels run
      const RandomWeight stored(format == WeightFormat::Int4Panels ? WeightFormat::Int4Group : WeightFormat::Mxfp4,
                                rows, cols);
      weight = repack_4bit_panels(stored.weight, *repacked);
      return;
    }
    std::mt19937 rng(7);
    weight.format = format;
    weight.rows = rows;
    weight.cols = weight.stored_cols = cols;
    int64_t data_bytes = rows * cols * 2, scale_bytes = 0;
    if (format == WeightFormat::Int4Group) data_bytes = rows * cols / 2, scale_bytes = rows * cols / 32 * 2;
    if (format == WeightFormat::Mxfp4) data_bytes = rows * cols / 2, scale_bytes = rows * cols / 32;
    if (format == WeightFormat::Fp8Block)
      data_bytes = rows * cols, scale_bytes = ((rows + 127) / 128) * ((cols + 127) / 128) * 4;
    const int64_t group = int8_group > 0 ? int8_group : cols;
    if (format == WeightFormat::Int8Block) data_bytes = rows * cols, scale_bytes = rows * (cols / group) * 4;
    data.resize(size_t(data_bytes));
    scales.resize(size_t(scale_bytes));
    for (auto& byte : data) byte = uint8_t(rng());
    if (format == WeightFormat::BF16) {
      auto* values = reinterpret_cast<uint16_t*>(data.data());
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (int64_t i = 0; i < rows * cols; ++i) values[i] = f32_to_bf16(normal(rng));
    }
    if (format == WeightFormat::Fp8Block)
      for (auto& byte : data) byte &= 0x77;  // finite, |x| < 256
    weight.data = data.data();
    if (format == WeightFormat::Int4Group) {
      auto* bf16 = reinterpret_cast<uint16_t*>(scales.data());
      for (int64_t i = 0; i < scale_bytes / 2; ++i) bf16[i] = f32_to_bf16(0.01f);
      weight.group_scale = bf16;
    }
    if (format == WeightFormat::Mxfp4) {
      for (auto& byte : scales) byte = 120;
      weight.e8m0_scale = scales.data();
    }
    if (format == WeightFormat::Int8Block) weight.block_rows = 1, weight.block_cols = group;
    if (format == WeightFormat::Fp8Block || format == WeightFormat::Int8Block) {
      auto* f32 = reinterpret_cast<float*>(scales.data());
      for (int64_t i = 0; i < scale_bytes / 4; ++i) f32[i] = 0.001f;
      weight.block_scale = f32;
    }
  }

  // A copy of `source` in memory of its own (the copies keep the weights out of L3): copying
  // bytes, where drawing new values for 1 GB of copies took seconds on every benchmark run.
  explicit RandomWeight(const RandomWeight& source) : data(source.data), scales(source.scales), weight(source.weight) {
    if (weight.format == WeightFormat::Bf16Panels || is_4bit_panels(weight.format)) {  // codes, then any scales
      uint8_t* copy = repacked->allocate(weight.bytes());
      std::memcpy(copy, source.weight.data, weight.bytes());
      const size_t codes = weight.stored_ranges().front().bytes;
      if (weight.group_scale) weight.group_scale = reinterpret_cast<const uint16_t*>(copy + codes);
      if (weight.e8m0_scale) weight.e8m0_scale = copy + codes;
      weight.data = copy;
      return;
    }
    weight.data = data.data();
    if (weight.group_scale) weight.group_scale = reinterpret_cast<const uint16_t*>(scales.data());
    if (weight.e8m0_scale) weight.e8m0_scale = scales.data();
    if (weight.block_scale) weight.block_scale = reinterpret_cast<const float*>(scales.data());
  }
  RandomWeight(RandomWeight&&) = default;
};

// Grows `weights` (a drawn weight) to `copies` copies of its first.
inline void add_copies(std::vector<RandomWeight>& weights, int copies) {
  weights.reserve(size_t(copies));  // no reallocation while the first is copied
  while (int(weights.size()) < copies) weights.emplace_back(weights.front());
}

inline std::vector<float> random_activations(int64_t n) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

}  // namespace mlaserve::bench
