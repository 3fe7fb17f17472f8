// A .gguf file's bytes: GgufFile checks the header, every metadata value and every tensor's type,
// shape and offset before any tensor is touched, so every tensor it returns lies inside the file;
// the target dequantizes each one end to end to let ASan check that, then reads a deepseek2
// file's keys as a config.
#include <vector>

#include "base/error.h"
#include "fuzz_input.h"
#include "io/gguf.h"
#include "io/gguf_model.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mlaserve::fuzz::write_input_file(data, size, "gguf");
  try {
    const mlaserve::GgufFile file(path);
    for (const mlaserve::GgufTensor& tensor : file.tensors()) {
      // A tensor's byte count is what its shape and type say, and it lies inside the file.
      if (mlaserve::ggml_row_bytes(tensor.type, tensor.numel()) != tensor.nbytes ||
          tensor.data + tensor.nbytes > file.file().data() + file.file().size())
        __builtin_trap();
      if (tensor.numel() > (int64_t(1) << 20)) continue;
      std::vector<float> values(size_t(tensor.numel()));
      mlaserve::dequantize_ggml(tensor.type, tensor.data, tensor.numel(), values.data());
    }
    // A deepseek2 file's keys: a config.json that parses, or an Error naming the key.
    std::vector<std::unique_ptr<mlaserve::GgufFile>> parts;
    parts.push_back(std::make_unique<mlaserve::GgufFile>(path));
    mlaserve::parse_model_config(mlaserve::gguf_config_json(parts));
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
