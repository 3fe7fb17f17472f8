#include "io/linear_weight.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/numa.h"
#include "base/thread_pool.h"

namespace mlaserve {

namespace {

constexpr size_t kSharedBlock = size_t(32) << 20;

}  // namespace

uint8_t* WeightCopies::new_block(size_t bytes) {
  uint8_t* block = blocks_.emplace_back(allocate_huge_page_bytes(bytes)).get();
  const std::string error = place_memory(block, bytes, numa_nodes_);
  if (placement_error_.empty()) placement_error_ = error;
  return block;
}

uint8_t* WeightCopies::allocate(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  bytes_ += bytes;
  if (bytes >= kHugePageBytes) return new_block((bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
  if (bytes > left_) {
    next_ = new_block(kSharedBlock);
    left_ = kSharedBlock;
  }
  uint8_t* copy = next_;
  next_ += bytes;
  left_ -= bytes;
  return copy;
}

namespace {

// Copies `rows` runs of `run` bytes, source run r at `source + r * stride`, to `out`.
void gather_runs(const uint8_t* source, int64_t rows, size_t stride, size_t run, uint8_t* out) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(out + size_t(r) * run, source + size_t(r) * stride, run);
}

}  // namespace

LinearWeight compact_columns(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source) {
  if (view.cols == view.stored_cols) return view;
  return copy_weight(view, storage, source);
}

namespace {

// The stored rows' pages of `source` holding `rows` rows of row_bytes from first_row.
void release_rows(const Checkpoint* source, const void* stored, size_t row_bytes, int64_t first_row, int64_t rows) {
  if (source)
    source->release_pages(static_cast<const uint8_t*>(stored) + size_t(first_row) * row_bytes,
                          size_t(rows) * row_bytes);
}

// INT4 and MXFP4: 4-bit codes, two columns a byte (INT4's little-endian words hold 8 in the same
// order), then the rows' scales, `scale_bytes` each per `group_cols` columns (INT4: a bf16 per
// group; MXFP4: an E8M0 byte per 32). Returns where the copied scales start.
uint8_t* copy_4bit(const LinearWeight& view, const uint8_t* stored_scales, int64_t group_cols, size_t scale_bytes,
                   WeightCopies& storage, const Checkpoint* source, LinearWeight& out) {
  const size_t bytes = size_t(view.cols / 2), stored_bytes = size_t(view.stored_cols / 2);
  const size_t groups = size_t(view.cols / group_cols), stored_groups = size_t(view.stored_cols / group_cols);
  uint8_t* buffer = storage.allocate(size_t(view.rows) * (bytes + groups * scale_bytes));
  gather_runs(
      static_cast<const uint8_t*>(view.data) + size_t(view.row_offset) * stored_bytes + size_t(view.col_offset / 2),
      view.rows, stored_bytes, bytes, buffer);
  uint8_t* scales = buffer + size_t(view.rows) * bytes;
  gather_runs(
      stored_scales + (size_t(view.row_offset) * stored_groups + size_t(view.col_offset / group_cols)) * scale_bytes,
      view.rows, stored_groups * scale_bytes, groups * scale_bytes, scales);
  release_rows(source, view.data, stored_bytes, view.row_offset, view.rows);
  out.data = buffer;
  return scales;
}

// F32, BF16, F16 (element 4 or 2 bytes), and FP8 / INT8 (1 byte) with their blocks' scales
// after the codes (4-byte aligned).
LinearWeight copy_elements(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source,
                           LinearWeight out) {
  const bool block_scaled = is_block_scaled(view.format);
  const size_t element = view.format == WeightFormat::F32 ? 4 : block_scaled ? 1 : 2;
  size_t scale_bytes = 0, block_row_count = 0, block_count = 0, stored_blocks = 0;
  if (block_scaled) {
    block_row_count = size_t((view.rows + view.block_rows - 1) / view.block_rows);
    block_count = size_t((view.cols + view.block_cols - 1) / view.block_cols);
    stored_blocks = size_t((view.stored_cols + view.block_cols - 1) / view.block_cols);
    scale_bytes = block_row_count * block_count * 4;
  }
  const size_t data_bytes = size_t(view.rows * view.cols) * element;
  uint8_t* buffer = storage.allocate((data_bytes + 3) / 4 * 4 + scale_bytes);
  gather_runs(
      static_cast<const uint8_t*>(view.data) + (size_t(view.row_offset * view.stored_cols + view.col_offset)) * element,
      view.rows, size_t(view.stored_cols) * element, size_t(view.cols) * element, buffer);
  release_rows(source, view.data, size_t(view.stored_cols) * element, view.row_offset, view.rows);
  out.data = buffer;
  if (block_scaled) {
    uint8_t* scales = buffer + (data_bytes + 3) / 4 * 4;
    gather_runs(
        reinterpret_cast<const uint8_t*>(view.block_scale) +
            (size_t(view.row_offset / view.block_rows) * stored_blocks + size_t(view.col_offset / view.block_cols)) * 4,
        int64_t(block_row_count), stored_blocks * 4, block_count * 4, scales);
    out.block_scale = reinterpret_cast<const float*>(scales);
  }
  return out;
}

}  // namespace

LinearWeight copy_weight(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source) {
  if (view.format == WeightFormat::Bf16Panels || is_4bit_panels(view.format)) return view;
  if (is_block_scaled(view.format) &&
      (view.row_offset % view.block_rows != 0 || view.col_offset % view.block_cols != 0))
    return view;
  LinearWeight out = view;  // the view's own rows and columns, stored alone
  out.stored_cols = view.cols;
  out.row_offset = out.col_offset = 0;
  if (view.format == WeightFormat::Int4Group) {
    const uint8_t* scales = reinterpret_cast<const uint8_t*>(view.group_scale);
    out.group_scale =
        reinterpret_cast<const uint16_t*>(copy_4bit(view, scales, view.group_size, 2, storage, source, out));
    return out;
  }
  if (view.format == WeightFormat::Mxfp4) {
    out.e8m0_scale = copy_4bit(view, view.e8m0_scale, 32, 1, storage, source, out);
    return out;
  }
  return copy_elements(view, storage, source, out);
}

namespace {

// One panel: out[bf16_panel_index(i, c)] = rows[i][c] for 16 rows (null: a zero row past the
// weight's end), zero past `cols` to the panel's end. A row's two columns from an even one are
// already one 32-bit lane, so 8 columns of 4 rows at a time are a 4 x 4 transpose of lanes.
void repack_panel(const uint16_t* const rows[kBf16PanelRows], int64_t cols, uint16_t* out) {
  int64_t c = 0;
#if defined(__SSE2__)
  for (; c + 8 <= cols; c += 8)
    for (int i = 0; i < kBf16PanelRows; i += 4) {
      __m128i lanes[4];  // row i + j's columns c..c+7 as 4 pairs
      for (int j = 0; j < 4; ++j)
        lanes[j] =
            rows[i + j] ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i + j] + c)) : _mm_setzero_si128();
      const __m128i t0 = _mm_unpacklo_epi32(lanes[0], lanes[1]), t1 = _mm_unpacklo_epi32(lanes[2], lanes[3]);
      const __m128i t2 = _mm_unpackhi_epi32(lanes[0], lanes[1]), t3 = _mm_unpackhi_epi32(lanes[2], lanes[3]);
      const __m128i pairs[4] = {_mm_unpacklo_epi64(t0, t1), _mm_unpackhi_epi64(t0, t1), _mm_unpacklo_epi64(t2, t3),
                                _mm_unpackhi_epi64(t2, t3)};
      for (int pair = 0; pair < 4; ++pair)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + bf16_panel_index(i, c + 2 * pair)), pairs[pair]);
    }
#endif
  const int64_t padded_cols = bf16_panel_words(cols) / kBf16PanelRows;
  for (; c < padded_cols; ++c)
    for (int i = 0; i < kBf16PanelRows; ++i) out[bf16_panel_index(i, c)] = c < cols && rows[i] ? rows[i][c] : 0;
}

}  // namespace

LinearWeight repack_bf16_panels(const LinearWeight& weight, WeightCopies& storage, const Checkpoint* source) {
  if (weight.format != WeightFormat::BF16) return weight;
  const int64_t panels = (weight.rows + kBf16PanelRows - 1) / kBf16PanelRows, cols = weight.cols;
  const int64_t panel_words = bf16_panel_words(cols);
  auto* out = reinterpret_cast<uint16_t*>(storage.allocate(size_t(panels * panel_words) * 2));
  const auto* stored = static_cast<const uint16_t*>(weight.data);
  thread_pool().parallel_for(panels, [&](int64_t begin, int64_t end, int) {
    for (int64_t panel = begin; panel < end; ++panel) {
      const uint16_t* rows[kBf16PanelRows];
      for (int64_t i = 0; i < kBf16PanelRows; ++i) {
        const int64_t row = panel * kBf16PanelRows + i;
        rows[i] =
            row < weight.rows ? stored + (weight.row_offset + row) * weight.stored_cols + weight.col_offset : nullptr;
      }
      repack_panel(rows, cols, out + panel * panel_words);
    }
  });
  if (source)
    source->release_pages(stored + weight.row_offset * weight.stored_cols,
                          size_t(weight.rows * weight.stored_cols) * 2);
  LinearWeight packed = weight;
  packed.format = WeightFormat::Bf16Panels;
  packed.data = out;
  packed.stored_cols = cols;
  packed.row_offset = packed.col_offset = 0;
  return packed;
}

const TensorInfo& WeightLoader::expect(const std::string& name, const std::vector<int64_t>& shape) {
  const TensorInfo& tensor = checkpoint_.get(name);
  MLA_CHECK(tensor.shape == shape, "tensor '{}'{}: expected shape {}, found {}", name,
            tensor.gguf_name.empty() ? "" : " (GGUF '" + tensor.gguf_name + "')", shape_string(shape),
            tensor.shape_string());
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
      default: fail("tensor '{}': dtype {} where F32, BF16 or F16 is expected", tensor.name, dtype_name(tensor.dtype));
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

const float* WeightLoader::vector(const std::string& name, int64_t size) { return to_f32(expect(name, {size})); }

const float* WeightLoader::leading(const std::string& name, int64_t count) {
  const TensorInfo& tensor = checkpoint_.get(name);
  int64_t long_dims = 0;
  for (int64_t d : tensor.shape) long_dims += d != 1;
  MLA_CHECK(long_dims <= 1 && tensor.numel() >= count,
            "tensor '{}': expected a vector of at least {} values, found shape {}", name, count, tensor.shape_string());
  return to_f32(tensor);
}

const float* WeightLoader::array(const std::string& name, const std::vector<int64_t>& shape) {
  return to_f32(expect(name, shape));
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

namespace {

// A weight of one byte an element (FP8, INT8) with a float scale per block_rows x block_cols.
LinearWeight block_scaled_weight(WeightFormat format, const TensorInfo& tensor, int64_t rows, int64_t cols,
                                 int64_t block_rows, int64_t block_cols, const float* block_scale) {
  LinearWeight weight;
  weight.format = format;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = tensor.data;
  weight.block_rows = block_rows;
  weight.block_cols = block_cols;
  weight.block_scale = block_scale;
  return weight;
}

}  // namespace

LinearWeight WeightLoader::fp8(const std::string& prefix, const TensorInfo& tensor, int64_t rows, int64_t cols) {
  MLA_CHECK(config_.quant == WeightQuant::Fp8Block,
            "tensor '{}.weight' is F8_E4M3 but config.json has no fp8 quantization_config", prefix);
  const int64_t block_rows = config_.fp8_block_out, block_cols = config_.fp8_block_in;
  const std::vector<int64_t> scale_shape = {(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols};
  const std::string scale_name = prefix + ".weight_scale_inv";
  MLA_CHECK(checkpoint_.contains(scale_name), "missing tensor '{}' for FP8 weight '{}.weight'", scale_name, prefix);
  return block_scaled_weight(WeightFormat::Fp8Block, tensor, rows, cols, block_rows, block_cols,
                             to_f32(expect(scale_name, scale_shape)));
}

// compressed-tensors int-quantized (W8A8 checkpoints): weight I8 [rows, cols], symmetric,
// weight_scale [rows, 1] (strategy channel) or [rows, cols / group] (group), any float dtype.
LinearWeight WeightLoader::int8(const std::string& prefix, const TensorInfo& tensor, int64_t rows, int64_t cols) {
  MLA_CHECK(config_.quant == WeightQuant::Int8,
            "tensor '{}.weight' is I8 but config.json has no int-quantized compressed-tensors config", prefix);
  int64_t group = config_.int8_group_size > 0 ? config_.int8_group_size : cols;
  const std::string scale_name = prefix + ".weight_scale";
  MLA_CHECK(checkpoint_.contains(scale_name), "missing tensor '{}' for INT8 weight '{}.weight'", scale_name, prefix);
  const TensorInfo& scale = checkpoint_.get(scale_name);
  if (!scale.gguf_name.empty() && scale.shape.size() == 2 && scale.shape[1] > 0 && cols % scale.shape[1] == 0)
    group = cols / scale.shape[1];  // a GGUF's types differ by weight: Q6_K's groups are 16, Q8_0's 32
  MLA_CHECK(cols % group == 0, "'{}': in_features {} is not a multiple of group_size {}", prefix, cols, group);
  return block_scaled_weight(WeightFormat::Int8Block, tensor, rows, cols, 1, group,
                             to_f32(expect(scale_name, {rows, cols / group})));
}

LinearWeight WeightLoader::int4(const std::string& prefix, int64_t rows, int64_t cols) {
  MLA_CHECK(config_.quant == WeightQuant::Int4Group,
            "tensor '{}.weight_packed' is INT4 but config.json has no compressed-tensors config", prefix);
  const int64_t group = config_.int4_group_size;
  MLA_CHECK(cols % group == 0, "'{}': in_features {} is not a multiple of group_size {}", prefix, cols, group);
  const TensorInfo& packed = expect(prefix + ".weight_packed", {rows, cols / 8});
  MLA_CHECK(packed.dtype == DType::I32, "tensor '{}.weight_packed': dtype {} where I32 is expected", prefix,
            dtype_name(packed.dtype));
  const TensorInfo& scale = expect(prefix + ".weight_scale", {rows, cols / group});
  MLA_CHECK(scale.dtype == DType::BF16, "tensor '{}.weight_scale': dtype {} where BF16 is expected", prefix,
            dtype_name(scale.dtype));
  const TensorInfo& shape = expect(prefix + ".weight_shape", {2});
  MLA_CHECK(shape.dtype == DType::I32 || shape.dtype == DType::I64,
            "tensor '{}.weight_shape': dtype {} where I32 or I64 is expected", prefix, dtype_name(shape.dtype));
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
  MLA_CHECK(stored[0] == rows && stored[1] == cols, "tensor '{}.weight_shape': expected [{}, {}], found [{}, {}]",
            prefix, rows, cols, stored[0], stored[1]);
  LinearWeight weight;
  weight.format = WeightFormat::Int4Group;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = aligned(packed, 4);
  weight.group_scale = static_cast<const uint16_t*>(aligned(scale, 2));
  weight.group_size = group;
  weight.activation_quant = activation_quant_;
  return weight;
}

LinearWeight WeightLoader::mxfp4(const std::string& prefix, int64_t rows, int64_t cols) {
  MLA_CHECK(cols % 32 == 0, "'{}': in_features {} is not a multiple of the MXFP4 group 32", prefix, cols);
  const TensorInfo& packed = expect(prefix + ".weight_packed", {rows, cols / 2});
  MLA_CHECK(packed.dtype == DType::U8, "tensor '{}.weight_packed': dtype {} where U8 is expected", prefix,
            dtype_name(packed.dtype));
  const TensorInfo& scale = expect(prefix + ".weight_scale", {rows, cols / 32});
  MLA_CHECK(scale.dtype == DType::U8, "tensor '{}.weight_scale': dtype {} where U8 (E8M0) is expected", prefix,
            dtype_name(scale.dtype));
  LinearWeight weight;
  weight.format = WeightFormat::Mxfp4;
  weight.rows = rows;
  weight.cols = cols;
  weight.stored_cols = cols;
  weight.data = packed.data;
  weight.e8m0_scale = scale.data;
  weight.group_size = 32;
  weight.activation_quant = activation_quant_;
  return weight;
}

LinearWeight WeightLoader::linear(const std::string& prefix, int64_t rows, int64_t cols) {
  if (checkpoint_.contains(prefix + ".weight_packed"))
    return config_.quant == WeightQuant::Mxfp4 ? mxfp4(prefix, rows, cols) : int4(prefix, rows, cols);
  const std::string name = prefix + ".weight";
  const TensorInfo& tensor = checkpoint_.get(name);
  if (tensor.dtype == DType::F8_E4M3) {
    expect(name, {rows, cols});
    return fp8(prefix, tensor, rows, cols);
  }
  if (tensor.dtype == DType::I8) {
    expect(name, {rows, cols});
    return int8(prefix, tensor, rows, cols);
  }
  return dense(name, rows, cols);
}

}  // namespace mlaserve
