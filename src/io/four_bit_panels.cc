// repack_4bit_panels (linear_weight.h): row-major 4-bit rows to 16-row panels of words.
#include <cstring>

#include "base/thread_pool.h"
#include "io/linear_weight.h"

namespace mlaserve {

LinearWeight repack_4bit_panels(const LinearWeight& weight, WeightCopies& storage, const Checkpoint* source) {
  const bool int4 = weight.format == WeightFormat::Int4Group;
  if ((!int4 && weight.format != WeightFormat::Mxfp4) || weight.activation_quant != ActivationQuant::Int8)
    return weight;
  const int64_t group = int4 ? weight.group_size : 32;
  if (weight.cols % 32 != 0 || group % 32 != 0) return weight;
  const int64_t panels = four_bit_panels(weight.rows), words = weight.cols / 8, groups = weight.cols / group;
  const size_t scale_bytes = int4 ? 2 : 1, code_bytes = size_t(panels * kFourBitPanelRows * weight.cols / 2);
  uint8_t* out = storage.allocate(code_bytes + size_t(panels * kFourBitPanelRows * groups) * scale_bytes);
  uint8_t* out_scales = out + code_bytes;
  const auto* stored = static_cast<const uint8_t*>(weight.data);
  const auto* stored_scales = int4 ? reinterpret_cast<const uint8_t*>(weight.group_scale) : weight.e8m0_scale;
  const size_t row_bytes = size_t(weight.stored_cols / 2),
               scale_row_bytes = size_t(weight.stored_cols / group) * scale_bytes;
  thread_pool().parallel_for(panels, [&](int64_t begin, int64_t end, int) {
    for (int64_t panel = begin; panel < end; ++panel)
      for (int64_t i = 0; i < kFourBitPanelRows; ++i) {
        const int64_t row = panel * kFourBitPanelRows + i;
        uint8_t* codes = out + size_t(panel * words * kFourBitPanelRows + i) * 4;
        uint8_t* scales = out_scales + size_t(panel * groups * kFourBitPanelRows + i) * scale_bytes;
        if (row >= weight.rows) {
          for (int64_t j = 0; j < words; ++j) std::memset(codes + size_t(j * kFourBitPanelRows) * 4, 0, 4);
          for (int64_t g = 0; g < groups; ++g)
            std::memset(scales + size_t(g * kFourBitPanelRows) * scale_bytes, 0, scale_bytes);
          continue;
        }
        const uint8_t* from = stored + size_t(weight.row_offset + row) * row_bytes + size_t(weight.col_offset / 2);
        for (int64_t j = 0; j < words; ++j) std::memcpy(codes + size_t(j * kFourBitPanelRows) * 4, from + 4 * j, 4);
        const uint8_t* from_scales = stored_scales + size_t(weight.row_offset + row) * scale_row_bytes +
                                     size_t(weight.col_offset / group) * scale_bytes;
        for (int64_t g = 0; g < groups; ++g)
          std::memcpy(scales + size_t(g * kFourBitPanelRows) * scale_bytes, from_scales + size_t(g) * scale_bytes,
                      scale_bytes);
      }
  });
  if (source) source->release_pages(stored + size_t(weight.row_offset) * row_bytes, size_t(weight.rows) * row_bytes);
  LinearWeight packed = weight;
  packed.format = int4 ? WeightFormat::Int4Panels : WeightFormat::Mxfp4Panels;
  packed.data = out;
  if (int4)
    packed.group_scale = reinterpret_cast<const uint16_t*>(out_scales);
  else
    packed.e8m0_scale = out_scales;
  packed.stored_cols = weight.cols;
  packed.row_offset = packed.col_offset = 0;
  return packed;
}

}  // namespace mlaserve
