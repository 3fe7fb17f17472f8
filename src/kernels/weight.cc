#include "kernels/weight.h"

#include "base/error.h"
#include "kernels/packed_gemm.h"  // kPackedGemmDepth
#include "kernels/quant_dot.h"    // kQ8Block

namespace mlaserve {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Fp8Block: return "fp8";
    case WeightFormat::Int8Block: return "int8";
    case WeightFormat::Int4Group: return "int4";
    case WeightFormat::Mxfp4: return "mxfp4";
    case WeightFormat::Bf16Panels: return "bf16-panels";
    case WeightFormat::Int4Panels: return "int4-panels";
    case WeightFormat::Mxfp4Panels: return "mxfp4-panels";
  }
  return "?";
}

ActivationQuant activation_quant_from_name(const std::string& name) {
  if (name == "int8") return ActivationQuant::Int8;
  if (name == "off") return ActivationQuant::Off;
  fail("unknown --act-quant '{}' (int8, off)", name);
}

size_t LinearWeight::bytes() const {
  const size_t count = size_t(rows) * size_t(cols);
  switch (format) {
    case WeightFormat::F32: return count * 4;
    case WeightFormat::F16:
    case WeightFormat::BF16: return count * 2;
    case WeightFormat::Fp8Block:
    case WeightFormat::Int8Block:
      return count + size_t((rows + block_rows - 1) / block_rows) * size_t((cols + block_cols - 1) / block_cols) * 4;
    case WeightFormat::Int4Group: return count / 2 + count / size_t(group_size) * 2;
    case WeightFormat::Mxfp4: return count / 2 + count / 32;
    case WeightFormat::Bf16Panels:
      return size_t((rows + kBf16PanelRows - 1) / kBf16PanelRows) * size_t(bf16_panel_words(cols)) * 2;
    case WeightFormat::Int4Panels:
    case WeightFormat::Mxfp4Panels: {
      const size_t padded = size_t(four_bit_panels(rows) * kFourBitPanelRows) * size_t(cols);
      return padded / 2 + (format == WeightFormat::Int4Panels ? padded / size_t(group_size) * 2 : padded / 32);
    }
  }
  return 0;
}

namespace {
// count rows of row_bytes each, from row `first` of `base`.
ByteRange rows_of(const void* base, size_t row_bytes, int64_t first, int64_t count) {
  return ByteRange{static_cast<const uint8_t*>(base) + size_t(first) * row_bytes, size_t(count) * row_bytes};
}
}  // namespace

ByteRange LinearWeight::stored_codes() const {
  const size_t stored = size_t(stored_cols);
  switch (format) {
    case WeightFormat::F32: return rows_of(data, stored * 4, row_offset, rows);
    case WeightFormat::F16:
    case WeightFormat::BF16: return rows_of(data, stored * 2, row_offset, rows);
    case WeightFormat::Fp8Block:
    case WeightFormat::Int8Block: return rows_of(data, stored, row_offset, rows);
    case WeightFormat::Int4Group:
    case WeightFormat::Mxfp4: return rows_of(data, stored / 2, row_offset, rows);
    case WeightFormat::Bf16Panels: return {data, bytes()};
    case WeightFormat::Int4Panels:
    case WeightFormat::Mxfp4Panels: return {data, size_t(four_bit_panels(rows) * kFourBitPanelRows) * size_t(cols) / 2};
  }
  return {};
}

std::vector<ByteRange> LinearWeight::stored_ranges() const {
  const size_t stored = size_t(stored_cols);
  switch (format) {
    case WeightFormat::Fp8Block:
    case WeightFormat::Int8Block: {
      const int64_t first_block = row_offset / block_rows, end_block = (row_offset + rows - 1) / block_rows + 1;
      const size_t scale_row = size_t((stored_cols + block_cols - 1) / block_cols) * 4;
      return {stored_codes(), rows_of(block_scale, scale_row, first_block, end_block - first_block)};
    }
    case WeightFormat::Int4Group:
      return {stored_codes(), rows_of(group_scale, stored / size_t(group_size) * 2, row_offset, rows)};
    case WeightFormat::Mxfp4: return {stored_codes(), rows_of(e8m0_scale, stored / 32, row_offset, rows)};
    case WeightFormat::Int4Panels:
    case WeightFormat::Mxfp4Panels: {
      const ByteRange codes = stored_codes();
      const void* scales = format == WeightFormat::Int4Panels ? static_cast<const void*>(group_scale) : e8m0_scale;
      return {codes, {scales, bytes() - codes.bytes}};
    }
    default: return {stored_codes()};  // unscaled formats (BF16 panels: one block)
  }
}

LinearWeight LinearWeight::rows_view(int64_t begin, int64_t end) const {
  MLA_CHECK(format != WeightFormat::Bf16Panels && !is_4bit_panels(format), "a repacked ({}) weight has no row views",
            weight_format_name(format));
  MLA_CHECK(0 <= begin && begin < end && end <= rows, "rows [{}, {}) outside a weight of {} rows", begin, end, rows);
  LinearWeight view = *this;
  view.row_offset += begin;
  view.rows = end - begin;
  return view;
}

LinearWeight LinearWeight::cols_view(int64_t begin, int64_t end) const {
  MLA_CHECK(format != WeightFormat::Bf16Panels && !is_4bit_panels(format), "a repacked ({}) weight has no column views",
            weight_format_name(format));
  MLA_CHECK(0 <= begin && begin < end && end <= cols, "columns [{}, {}) outside a weight of {} columns", begin, end,
            cols);
  MLA_CHECK(
      (format != WeightFormat::Int4Group && format != WeightFormat::Mxfp4) || (col_offset + begin) % group_size == 0,
      "a {} weight can only be split at multiples of its group size {} (column {})", weight_format_name(format),
      group_size, begin);
  LinearWeight view = *this;
  view.col_offset += begin;
  view.cols = end - begin;
  return view;
}

bool LinearWeight::one_scale_block() const { return col_offset / block_cols == (col_offset + cols - 1) / block_cols; }

bool takes_q8_activations(const LinearWeight& weight) {
  if (weight.activation_quant != ActivationQuant::Int8) return false;
  return weight.format == WeightFormat::Mxfp4 ||
         (weight.format == WeightFormat::Int4Group && weight.group_size % kQ8Block == 0);
}

bool amx_supports(const LinearWeight& weight) {
  const bool whole_steps = weight.block_cols % kAmxStepCols == 0 && weight.col_offset % weight.block_cols == 0;
  switch (weight.format) {
    case WeightFormat::Bf16Panels:
    case WeightFormat::BF16: return true;
    case WeightFormat::Int8Block: return weight.block_rows == 1 && (weight.one_scale_block() || whole_steps);
    case WeightFormat::Fp8Block: return whole_steps;
    default: return false;
  }
}

bool packed_gemm_supports(const LinearWeight& weight) {
  return weight.format != WeightFormat::Int4Group || kPackedGemmDepth % weight.group_size == 0;
}

}  // namespace mlaserve
