#include "io/requantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/dtype.h"
#include "base/thread_pool.h"

namespace mlaserve {

void quantize_int4_row(const float* values, int64_t cols, int64_t group, uint32_t* words, uint16_t* scales) {
  for (int64_t g = 0; g < cols / group; ++g) {
    float max_abs = 0.0f;
    for (int64_t c = g * group; c < (g + 1) * group; ++c) max_abs = std::max(max_abs, std::fabs(values[c]));
    const uint16_t scale_bits = f32_to_bf16(max_abs > 0 ? max_abs / 7.0f : 1.0f);
    const float scale = bf16_to_f32(scale_bits);
    if (scales) scales[g] = scale_bits;
    if (!words) continue;
    for (int64_t c = g * group; c < (g + 1) * group; ++c) {
      const int q = int(std::clamp(std::nearbyint(values[c] / scale), -8.0f, 7.0f));
      uint32_t& word = words[c / 8];
      if (c % 8 == 0) word = 0;
      word |= uint32_t(q + 8) << (4 * (c % 8));
    }
  }
}

LinearWeight requantize_int4(const LinearWeight& weight, WeightCopies& storage, bool into_panels,
                             const Checkpoint* source) {
  if (weight.format != WeightFormat::BF16 || weight.cols % kRequantizeGroup != 0) return weight;
  const int64_t rows = weight.rows, cols = weight.cols, groups = cols / kRequantizeGroup;
  // Row-major codes and scales: a temporary when they are repacked into panels next.
  std::vector<uint32_t> temporary_words;
  std::vector<uint16_t> temporary_scales;
  uint32_t* words;
  uint16_t* scales;
  if (into_panels) {
    temporary_words.resize(size_t(rows * cols / 8));
    temporary_scales.resize(size_t(rows * groups));
    words = temporary_words.data(), scales = temporary_scales.data();
  } else {
    uint8_t* buffer = storage.allocate(size_t(rows * cols / 2 + rows * groups * 2));
    words = reinterpret_cast<uint32_t*>(buffer), scales = reinterpret_cast<uint16_t*>(buffer + rows * cols / 2);
  }
  const auto* stored = static_cast<const uint16_t*>(weight.data);
  thread_pool().parallel_for(rows, [&](int64_t begin, int64_t end, int) {
    std::vector<float> values(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* row = stored + weight.element_offset(r);
      for (int64_t c = 0; c < cols; ++c) values[size_t(c)] = bf16_to_f32(row[c]);
      quantize_int4_row(values.data(), cols, kRequantizeGroup, words + r * cols / 8, scales + r * groups);
    }
  });
  if (source)
    source->release_pages(stored + weight.row_offset * weight.stored_cols, size_t(rows * weight.stored_cols) * 2);
  LinearWeight quantized;
  quantized.format = WeightFormat::Int4Group;
  quantized.rows = rows;
  quantized.cols = quantized.stored_cols = cols;
  quantized.data = words;
  quantized.group_scale = scales;
  quantized.group_size = kRequantizeGroup;
  quantized.activation_quant = ActivationQuant::Int8;
  return into_panels ? repack_4bit_panels(quantized, storage) : quantized;
}

}  // namespace mlaserve
