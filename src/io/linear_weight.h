// A weight matrix [rows = out_features, cols = in_features] kept in its stored format: the
// kernels dequantize on the fly, so a 4-bit checkpoint costs ~4 bits a weight of memory.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"

namespace mlaserve {

enum class WeightFormat {
  F32,
  F16,
  BF16,
  Fp8Block,   // F8_E4M3 [rows, cols] x weight_scale_inv F32 per block_rows x block_cols block
  Int8Block,  // compressed-tensors int-quantized: I8 [rows, cols] x weight_scale per 1 x block_cols
              // block (strategy channel: block_cols = cols; group: the group size)
  Int4Group,  // compressed-tensors pack-quantized: 8 offset-coded nibbles per int32, bf16 scales
  Mxfp4,      // compressed-tensors mxfp4-pack-quantized: 2 E2M1 nibbles per byte, E8M0 scale per 32
  Bf16Panels, // BF16 copied at load into the CPU kernels' layout (see repack_bf16_panels)
  Int4Panels, // Int4Group copied at load into 16-row panels (see repack_4bit_panels)
  Mxfp4Panels, // Mxfp4 likewise
};

// FP8 and INT8: one byte an element with a float scale per block_rows x block_cols block.
inline bool is_block_scaled(WeightFormat format) {
  return format == WeightFormat::Fp8Block || format == WeightFormat::Int8Block;
}

// Bf16Panels: rows in panels of 16, each panel stored as column pairs, [pair][row][2]: word
// (c / 2) * 32 + 2 * i + c % 2 of a panel holds row i's column c (bf16_panel_index). A 32-bit
// lane holds one row's two neighbouring columns, so a shift and a mask widen a load into the
// fp32 rows of both columns, and 16 pairs (32 columns, 1 KB) are an AMX B tile as stored.
// Panels are whole 32-column steps (bf16_panel_words); rows past `rows` and columns past
// `cols` are zero.
constexpr int64_t kBf16PanelRows = 16;
constexpr int64_t kBf16PanelStepCols = 32;
inline int64_t bf16_panel_words(int64_t cols) {
  return (cols + kBf16PanelStepCols - 1) / kBf16PanelStepCols * kBf16PanelStepCols * kBf16PanelRows;
}
inline int64_t bf16_panel_index(int64_t row_in_panel, int64_t col) {
  return col / 2 * 2 * kBf16PanelRows + 2 * row_in_panel + col % 2;
}

// Int4Panels and Mxfp4Panels: rows in panels of 16, each panel the 16 rows' 32-bit words of
// 8 codes side by side, [word][row]: word (p * cols / 8 + j) * 16 + i of data is row 16p + i's
// word j (columns 8j..8j+7, column c in nibble c % 8, as stored), so 64 bytes hold 16 rows'
// codes of 8 columns — one vpdpbusd operand a nibble half (the integer GEMM's step, without
// regrouping). The scales likewise, [panel][group][row]: INT4 a bf16 per group_size columns
// (group_scale), MXFP4 an E8M0 byte per 32 (e8m0_scale). Rows past `rows` have zero codes and
// scales; cols is a multiple of 32.
constexpr int64_t kFourBitPanelRows = 16;
inline bool is_4bit_panels(WeightFormat format) {
  return format == WeightFormat::Int4Panels || format == WeightFormat::Mxfp4Panels;
}
inline int64_t four_bit_panels(int64_t rows) { return (rows + kFourBitPanelRows - 1) / kFourBitPanelRows; }

const char* weight_format_name(WeightFormat format);

// What INT4 and MXFP4 weights' products take (`--act-quant`): Int8 rounds each token's
// activations to int8 per 32 columns (scale max|x| / 127) for integer dot products, as
// llama.cpp's Q4 kernels do (the fast default); Off keeps them fp32 against the dequantized
// weight, the exact maths of the stored model (slower: the kernels dequantize rows first).
enum class ActivationQuant { Int8, Off };
ActivationQuant activation_quant_from_name(const std::string& name);  // "int8" | "off"

// A span of stored bytes.
struct ByteRange {
  const void* begin = nullptr;
  size_t bytes = 0;
};

struct LinearWeight {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  // F32/F16/BF16/Fp8Block: [rows, cols] of the element type; Int4Group: int32 [rows, cols / 8],
  // element c of a row in bits 4*(c%8) of word c/8, stored as q + 8 (q in [-8, 7]); Mxfp4:
  // uint8 [rows, cols / 2], element c in the low nibble of byte c/2 when c is even.
  const void* data = nullptr;
  const float* block_scale = nullptr;  // Fp8Block, Int8Block: [ceil(rows/block_rows), ceil(cols/block_cols)]
  int64_t block_rows = 128, block_cols = 128;
  const uint16_t* group_scale = nullptr;  // Int4Group: bf16 [rows, cols / group_size]
  const uint8_t* e8m0_scale = nullptr;    // Mxfp4: [rows, cols / 32], scale 2^(s - 127)
  int64_t group_size = 32;                // Int4Group's group; Mxfp4: always 32
  ActivationQuant activation_quant = ActivationQuant::Int8;  // Int4Group and Mxfp4 only
  // A weight may be a view of part of a stored matrix (a tensor-parallel shard): rows
  // [row_offset, row_offset + rows) and columns [col_offset, col_offset + cols) of a stored
  // matrix with stored_cols columns. Scales are indexed in stored coordinates.
  int64_t stored_cols = 0;
  int64_t row_offset = 0, col_offset = 0;

  size_t bytes() const;  // bytes of this view, scales included
  // The stored bytes the kernels read for this view: its rows of the data and of the scales
  // (whole stored rows for a column view, whose rows' pages the kernels touch anyway).
  std::vector<ByteRange> stored_ranges() const;
  ByteRange stored_codes() const;  // the first of stored_ranges(): the values, without scales
  LinearWeight rows_view(int64_t begin, int64_t end) const;  // output features [begin, end)
  LinearWeight cols_view(int64_t begin, int64_t end) const;  // input features [begin, end)
};

// The bytes a model copies out of the checkpoint at load (compacted column slices, repacked
// panels), in blocks aligned to 2 MB and asked for transparent huge pages: fewer faults at load,
// and decode streams them without a TLB miss every 4 KB. Copies under 2 MB (an expert's
// matrix) are packed one after another into shared 32 MB blocks: malloc'd one by one they sat
// on 4 KB pages, and mini's routed experts read at ~17 GB/s where its huge-page LM head read
// at ~30. Not zeroed: whoever fills a copy touches its pages first, so for the repacking the
// pool's threads fault them in (and the kernel clears them) in parallel. With NUMA nodes
// (`--numa`: the rank's), each block's pages are placed on them before anything touches them.
class WeightCopies {
 public:
  explicit WeightCopies(std::vector<int> numa_nodes = {}) : numa_nodes_(std::move(numa_nodes)) {}
  // `bytes` of uninitialised memory, 64-byte aligned, owned until this is destroyed.
  uint8_t* allocate(size_t bytes);
  size_t bytes() const { return bytes_; }  // allocated so far
  const std::vector<int>& numa_nodes() const { return numa_nodes_; }
  // The first failure to place a block on the nodes ("" when none: the copies run unplaced).
  const std::string& placement_error() const { return placement_error_; }

 private:
  struct Free {
    void operator()(uint8_t* block) const;
  };
  uint8_t* new_block(size_t bytes);

  std::vector<int> numa_nodes_;
  std::string placement_error_;
  std::vector<std::unique_ptr<uint8_t, Free>> blocks_;
  uint8_t* next_ = nullptr;  // the free end of the last shared block
  size_t left_ = 0;          // bytes free after next_
  size_t bytes_ = 0;
};

// A column view's rows are scattered over the stored matrix, so a rank that reads it touches
// every page of the whole matrix. This copies the view's own bytes (and scales) into a buffer
// appended to `storage` and releases the stored rows' pages of `source` (the mapped
// checkpoint), so the rank's memory holds its shard only. Views that are already contiguous,
// and FP8 views not aligned to the scale blocks, are returned unchanged.
LinearWeight compact_columns(const LinearWeight& view, WeightCopies& storage,
                             const Checkpoint* source = nullptr);

// The view's own bytes (and scales) copied into `storage` whether or not they are contiguous,
// the stored rows' pages of `source` released: what a rank does with its non-BF16 weights at
// load, so that decode streams them from huge pages rather than the mapping's 4 KB pages
// (small INT4 decode 24 -> 32 tok/s). Panels, and FP8 views not aligned to the scale blocks,
// are returned unchanged.
LinearWeight copy_weight(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source = nullptr);

// A BF16 weight (or view) copied into the Bf16Panels layout, in a buffer appended to `storage`,
// and the stored rows' pages of `source` released, as compact_columns does. Prefill then runs
// the packed GEMM straight from the copy with no per-call decoding, and decode streams one
// panel after another (llama.cpp and ik_llama.cpp repack at load for the same reasons). Other
// formats are returned unchanged. A Bf16Panels weight has no views: repack after sharding.
LinearWeight repack_bf16_panels(const LinearWeight& weight, WeightCopies& storage,
                                const Checkpoint* source = nullptr);

// An INT4 or MXFP4 weight (or view) copied into the Int4Panels / Mxfp4Panels layout, in a
// buffer appended to `storage`, the stored rows' pages of `source` released: the integer GEMM
// then reads its 16-row steps as stored, and decode's dots take the same steps (one vpdpbusd
// for 16 rows and 4 columns, where row-major rows take one for 4 columns of 4 blocks of a row,
// with a scale step every two). Other formats, INT4 groups or columns not of whole 32-column
// blocks, and weights whose activations stay fp32 (ActivationQuant::Off: the panel kernels take
// int8 only), are returned unchanged. No views: repack after sharding.
LinearWeight repack_4bit_panels(const LinearWeight& weight, WeightCopies& storage,
                                const Checkpoint* source = nullptr);

// Loads the tensors the model asks for from a checkpoint, checking dtype and shape of each
// against what the config implies; owns the few small tensors it had to convert.
class WeightLoader {
 public:
  WeightLoader(Checkpoint& checkpoint, const ModelConfig& config,
               ActivationQuant activation_quant = ActivationQuant::Int8)
      : checkpoint_(checkpoint), config_(config), activation_quant_(activation_quant) {}

  // prefix.weight (dense or FP8 with prefix.weight_scale_inv) or prefix.weight_packed (INT4).
  LinearWeight linear(const std::string& prefix, int64_t rows, int64_t cols);
  // A dense matrix (embeddings) that must not be quantized.
  LinearWeight dense(const std::string& name, int64_t rows, int64_t cols);
  // A 1-D float vector (norm weights, biases), converted to f32.
  const float* vector(const std::string& name, int64_t size);
  // The first `count` values of a float tensor whose dimensions are all 1 but one, of at least
  // `count` (Kimi K3 stores A_log with 128 entries for 96 heads).
  const float* leading(const std::string& name, int64_t count);
  // A float tensor of exactly `shape` (e.g. A_log [1, 1, H, 1], conv weights [C, 1, K]) as f32.
  const float* array(const std::string& name, const std::vector<int64_t>& shape);
  bool contains(const std::string& name) const { return checkpoint_.contains(name); }

 private:
  const TensorInfo& expect(const std::string& name, const std::vector<int64_t>& shape);
  const float* to_f32(const TensorInfo& tensor);
  // The tensor's bytes in place when aligned to `alignment`, else an aligned owned copy
  // (safetensors does not require writers to align the data).
  const void* aligned(const TensorInfo& tensor, size_t alignment);
  LinearWeight fp8(const std::string& prefix, const TensorInfo& weight, int64_t rows, int64_t cols);
  LinearWeight int4(const std::string& prefix, int64_t rows, int64_t cols);
  LinearWeight int8(const std::string& prefix, const TensorInfo& weight, int64_t rows, int64_t cols);
  LinearWeight mxfp4(const std::string& prefix, int64_t rows, int64_t cols);

  Checkpoint& checkpoint_;
  const ModelConfig& config_;
  ActivationQuant activation_quant_;  // given to every INT4 and MXFP4 weight
  std::deque<std::vector<float>> owned_;
};

}  // namespace mlaserve
