// Loading weights for the kernels (kernels/weight.h): checked views into the mapped
// checkpoint, and the copies a rank makes at load (column slices compacted, BF16 and 4-bit
// weights repacked into the kernels' panels, all on huge pages).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/huge_pages.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/weight.h"

namespace mlaserve {

// The bytes a model copies out of the checkpoint at load (compacted column slices, repacked
// panels), in blocks aligned to 2 MB and asked for transparent huge pages: fewer faults at load,
// and decode streams them without a TLB miss every 4 KB. Copies under 2 MB (an expert's
// matrix) are packed one after another into shared 32 MB blocks: malloc'd one by one they
// would sit on 4 KB pages and read markedly slower. Not zeroed: whoever fills a copy touches its pages first, so for
// the repacking the pool's threads fault them in (and the kernel clears them) in parallel. With NUMA nodes
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
  uint8_t* new_block(size_t bytes);

  std::vector<int> numa_nodes_;
  std::string placement_error_;
  std::vector<HugePageArray<uint8_t>> blocks_;
  uint8_t* next_ = nullptr;  // the free end of the last shared block
  size_t left_ = 0;          // bytes free after next_
  size_t bytes_ = 0;
};

// A column view's rows are scattered over the stored matrix, so a rank that reads it touches
// every page of the whole matrix. This copies the view's own bytes (and scales) into a buffer
// appended to `storage` and releases the stored rows' pages of `source` (the mapped
// checkpoint), so the rank's memory holds its shard only. Views that are already contiguous,
// and FP8 views not aligned to the scale blocks, are returned unchanged.
LinearWeight compact_columns(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source = nullptr);

// The view's own bytes (and scales) copied into `storage` whether or not they are contiguous,
// the stored rows' pages of `source` released: what a rank does with its non-BF16 weights at
// load, so that decode streams them from huge pages rather than the mapping's 4 KB pages.
// Panels, and FP8 views not aligned to the scale blocks, are returned unchanged.
LinearWeight copy_weight(const LinearWeight& view, WeightCopies& storage, const Checkpoint* source = nullptr);

// A BF16 weight (or view) copied into the Bf16Panels layout, in a buffer appended to `storage`,
// and the stored rows' pages of `source` released, as compact_columns does. Prefill then runs
// the packed GEMM straight from the copy with no per-call decoding, and decode streams one
// panel after another (llama.cpp and ik_llama.cpp repack at load for the same reasons). Other
// formats are returned unchanged. A Bf16Panels weight has no views: repack after sharding.
LinearWeight repack_bf16_panels(const LinearWeight& weight, WeightCopies& storage, const Checkpoint* source = nullptr);

// An INT4 or MXFP4 weight (or view) copied into the Int4Panels / Mxfp4Panels layout, in a
// buffer appended to `storage`, the stored rows' pages of `source` released: the integer GEMM
// then reads its 16-row steps as stored, and decode's dots take the same steps (one vpdpbusd
// for 16 rows and 4 columns, where row-major rows take one for 4 columns of 4 blocks of a row,
// with a scale step every two). Other formats, INT4 groups or columns not of whole 32-column
// blocks, and weights whose activations stay fp32 (ActivationQuant::Off: the panel kernels take
// int8 only), are returned unchanged. No views: repack after sharding.
LinearWeight repack_4bit_panels(const LinearWeight& weight, WeightCopies& storage, const Checkpoint* source = nullptr);

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
