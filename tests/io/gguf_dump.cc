// Reads a GGUF file with mlaserve's reader and writes what it read for a Python test to check:
// OUT_DIR/metadata.json (the keys' values) and, per tensor, OUT_DIR/<index>.npy (its values
// dequantized to fp32, in its torch shape) and a line "index name type shape" on stdout. Errors
// as the CLI reports them: one line and exit 1 for a named problem.
//
// Usage: gguf_dump FILE.gguf OUT_DIR
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/npy.h"
#include "io/gguf.h"
#include "io/safetensors.h"

int main(int argc, char** argv) {
  using namespace mlaserve;
  if (argc != 3) {
    std::fprintf(stderr, "usage: gguf_dump FILE.gguf OUT_DIR\n");
    return 2;
  }
  try {
    const auto parts = open_gguf(argv[1]);
    const std::string out = argv[2];
    std::ofstream(out + "/metadata.json")
        << parts[0]->metadata().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    int index = 0;
    for (const auto& part : parts)
      for (const GgufTensor& tensor : part->tensors()) {
        std::vector<float> values(size_t(tensor.numel()));
        dequantize_ggml(tensor.type, tensor.data, tensor.numel(), values.data());
        write_npy_f32(out + "/" + std::to_string(index) + ".npy", values.data(), tensor.shape);
        std::printf("%d %s %s %s\n", index++, tensor.name.c_str(), ggml_type_name(uint32_t(tensor.type)).c_str(),
                    shape_string(tensor.shape).c_str());
      }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
