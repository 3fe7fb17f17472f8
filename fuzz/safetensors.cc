// A .safetensors file's bytes, header and data: SafetensorsFile validates the header (JSON,
// dtypes, shapes, offsets) before any tensor is touched, so every tensor it returns must lie
// inside the file; the target reads each one end to end to let ASan check that.

#include "base/error.h"
#include "fuzz_input.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlaserve::fuzz::write_input_file(data, size, "safetensors");
  try {
    const mlaserve::SafetensorsFile file(path);
    for (const auto& [name, tensor] : file.tensors()) {
      volatile uint8_t sum = 0;
      for (size_t i = 0; i < tensor.nbytes; ++i) sum = sum ^ tensor.data[i];
      // A tensor's byte count is what its shape and dtype say.
      if (tensor.numel() < 0 || size_t(tensor.numel()) * mlaserve::dtype_size(tensor.dtype) != tensor.nbytes)
        __builtin_trap();
    }
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
