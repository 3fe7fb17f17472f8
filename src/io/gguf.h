// GGUF files (llama.cpp's format, versions 2 and 3), memory-mapped: the metadata as JSON values
// and the tensors in place. Hand-written because no Debian package reads the format; the
// header, every key and every tensor's type, shape and offset are checked against the file
// before any tensor is touched. A split set (NAME-00001-of-0000N.gguf) is opened from its
// first part.
#pragma once
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mmap_file.h"
#include "io/ggml_types.h"

namespace mlaserve {

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> shape;     // outermost first, as torch writes it: GGUF's ne reversed
  const uint8_t* data = nullptr;  // in the mapped file
  size_t nbytes = 0;
  std::string file;  // for messages

  int64_t numel() const;
};

// One mapped .gguf file.
class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // throws Error naming the file and the problem
  uint32_t version() const { return version_; }
  // Keys to values: integers, floats, booleans, strings (bytes as stored) and arrays of them.
  const nlohmann::json& metadata() const { return metadata_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const MappedFile& file() const { return *file_; }

 private:
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<GgufTensor> tensors_;
};

bool is_gguf_path(const std::string& path);  // names a file ending in .gguf
// The file, or every part of the split set whose first part it is (split.count parts named
// -0000k-of-0000N), the first part's metadata first; a missing or foreign part is an error.
std::vector<std::unique_ptr<GgufFile>> open_gguf(const std::string& path);

}  // namespace mlaserve
