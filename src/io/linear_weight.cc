#include "io/linear_weight.h"

#include <cstring>

#include "base/error.h"

namespace mlaserve {

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Fp8Block: return "fp8";
    case WeightFormat::Int4Group: return "int4";
  }
  return "?";
}

size_t LinearWeight::bytes() const {
  const size_t count = size_t(rows) * size_t(cols);
  switch (format) {
    case WeightFormat::F32: return count * 4;
    case WeightFormat::F16:
    case WeightFormat::BF16: return count * 2;
    case WeightFormat::Fp8Block:
      return count + size_t((rows + block_rows - 1) / block_rows) *
                         size_t((cols + block_cols - 1) / block_cols) * 4;
    case WeightFormat::Int4Group: return count / 2 + count / size_t(group_size) * 2;
  }
  return 0;
}

LinearWeight LinearWeight::rows_view(int64_t begin, int64_t end) const {
  MLA_CHECK(0 <= begin && begin < end && end <= rows, "rows [{}, {}) outside a weight of {} rows", begin, end, rows);
  LinearWeight view = *this;
  view.row_offset += begin;
  view.rows = end - begin;
  return view;
}

LinearWeight LinearWeight::cols_view(int64_t begin, int64_t end) const {
  MLA_CHECK(0 <= begin && begin < end && end <= cols, "columns [{}, {}) outside a weight of {} columns", begin, end, cols);
  MLA_CHECK(format != WeightFormat::Int4Group || (col_offset + begin) % group_size == 0,
            "an INT4 weight can only be split at multiples of its group size {} (column {})", group_size, begin);
  LinearWeight view = *this;
  view.col_offset += begin;
  view.cols = end - begin;
  return view;
}

const TensorInfo& WeightLoader::expect(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo& tensor = checkpoint_.get(name);
  MLA_CHECK(tensor.shape == shape, "tensor '{}': expected shape {}, found {}", name,
            shape_string(shape), tensor.shape_string());
  return tensor;
}

const float* WeightLoader::to_f32(const TensorInfo& tensor) {
  const int64_t count = tensor.numel();
  if (tensor.dtype == DType::F32 && reinterpret_cast<uintptr_t>(tensor.data) % alignof(float) == 0)
    return reinterpret_cast<const float*>(tensor.data);
  auto& values = owned_.emplace_back(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    uint16_t half;  // the data may be unaligned: copy, never dereference a cast pointer
    switch (tensor.dtype) {
      case DType::F32: std::memcpy(&values[i], tensor.data + 4 * i, 4); break;
      case DType::BF16:
        std::memcpy(&half, tensor.data + 2 * i, 2);
        values[i] = bf16_to_f32(half);
        break;
      case DType::F16:
        std::memcpy(&half, tensor.data + 2 * i, 2);
        values[i] = f16_to_f32(half);
        break;
      default:
        fail("tensor '{}': dtype {} where F32, BF16 or F16 is expected", tensor.name,
             dtype_name(tensor.dtype));
    }
  }
  return values.data();
}

const void* WeightLoader::aligned(const TensorInfo& tensor, size_t alignment) {
  if (reinterpret_cast<uintptr_t>(tensor.data) % alignment == 0) return tensor.data;
  auto& copy = owned_.emplace_back((tensor.nbytes + sizeof(float) - 1) / sizeof(float));
  std::memcpy(copy.data(), tensor.data, tensor.nbytes);
  return copy.data();
}

const float* WeightLoader::vector(const std::string& name, int64_t size) {
  return to_f32(expect(name, {size}));
}

LinearWeight WeightLoader::dense(const std::string& name, int64_t rows, int64_t cols) {
  const TensorInfo& tensor = expect(name, {rows, cols});
  LinearWeight weight;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  switch (tensor.dtype) {
    case DType::F32: weight.format = WeightFormat::F32; break;
    case DType::BF16: weight.format = WeightFormat::BF16; break;
    case DType::F16: weight.format = WeightFormat::F16; break;
    default:
      fail("tensor '{}': dtype {} is not a supported weight dtype here (F32, BF16, F16)", name,
           dtype_name(tensor.dtype));
  }
  weight.data = aligned(tensor, dtype_size(tensor.dtype));
  return weight;
}

LinearWeight WeightLoader::fp8(const std::string& prefix, const TensorInfo& tensor, int64_t rows,
                               int64_t cols) {
  MLA_CHECK(config_.quant == WeightQuant::Fp8Block,
            "tensor '{}.weight' is F8_E4M3 but config.json has no fp8 quantization_config", prefix);
  const int64_t block_rows = config_.fp8_block_out, block_cols = config_.fp8_block_in;
  const std::vector<int64_t> scale_shape = {(rows + block_rows - 1) / block_rows,
                                            (cols + block_cols - 1) / block_cols};
  const std::string scale_name = prefix + ".weight_scale_inv";
  MLA_CHECK(checkpoint_.contains(scale_name), "missing tensor '{}' for FP8 weight '{}.weight'",
            scale_name, prefix);
  LinearWeight weight;
  weight.format = WeightFormat::Fp8Block;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = tensor.data;
  weight.block_rows = block_rows;
  weight.block_cols = block_cols;
  weight.block_scale = to_f32(expect(scale_name, scale_shape));
  return weight;
}

LinearWeight WeightLoader::int4(const std::string& prefix, int64_t rows, int64_t cols) {
  MLA_CHECK(config_.quant == WeightQuant::Int4Group,
            "tensor '{}.weight_packed' is INT4 but config.json has no compressed-tensors config",
            prefix);
  const int64_t group = config_.int4_group_size;
  MLA_CHECK(cols % group == 0, "'{}': in_features {} is not a multiple of group_size {}", prefix,
            cols, group);
  const TensorInfo& packed = expect(prefix + ".weight_packed", {rows, cols / 8});
  MLA_CHECK(packed.dtype == DType::I32, "tensor '{}.weight_packed': dtype {} where I32 is expected",
            prefix, dtype_name(packed.dtype));
  const TensorInfo& scale = expect(prefix + ".weight_scale", {rows, cols / group});
  MLA_CHECK(scale.dtype == DType::BF16, "tensor '{}.weight_scale': dtype {} where BF16 is expected",
            prefix, dtype_name(scale.dtype));
  const TensorInfo& shape = expect(prefix + ".weight_shape", {2});
  MLA_CHECK(shape.dtype == DType::I32 || shape.dtype == DType::I64,
            "tensor '{}.weight_shape': dtype {} where I32 or I64 is expected", prefix,
            dtype_name(shape.dtype));
  int64_t stored[2];
  for (int i = 0; i < 2; ++i) {
    if (shape.dtype == DType::I32) {
      int32_t value;
      std::memcpy(&value, shape.data + 4 * i, 4);
      stored[i] = value;
    } else {
      std::memcpy(&stored[i], shape.data + 8 * i, 8);
    }
  }
  MLA_CHECK(stored[0] == rows && stored[1] == cols,
            "tensor '{}.weight_shape': expected [{}, {}], found [{}, {}]", prefix, rows, cols,
            stored[0], stored[1]);
  LinearWeight weight;
  weight.format = WeightFormat::Int4Group;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = aligned(packed, 4);
  weight.group_scale = static_cast<const uint16_t*>(aligned(scale, 2));
  weight.group_size = group;
  return weight;
}

LinearWeight WeightLoader::linear(const std::string& prefix, int64_t rows, int64_t cols) {
  if (checkpoint_.contains(prefix + ".weight_packed")) return int4(prefix, rows, cols);
  const std::string name = prefix + ".weight";
  const TensorInfo& tensor = checkpoint_.get(name);
  if (tensor.dtype == DType::F8_E4M3) {
    expect(name, {rows, cols});
    return fp8(prefix, tensor, rows, cols);
  }
  return dense(name, rows, cols);
}

}  // namespace mlaserve
