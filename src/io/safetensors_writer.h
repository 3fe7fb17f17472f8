// Writes a checkpoint in the real Hugging Face layout: model.safetensors, or shards
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json. Tensors are produced
// one at a time by a callback, so writing a multi-GB model needs only one tensor of memory.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace mlaserve {

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::function<void(uint8_t* bytes)> fill;  // writes numel * dtype_size bytes
};

// max_shard_bytes 0: one file. progress(done, total) is called after each tensor.
void write_checkpoint(const std::string& directory, const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes,
                      const std::function<void(size_t, size_t)>& progress = {});

}  // namespace mlaserve
