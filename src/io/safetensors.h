// safetensors checkpoints, memory-mapped: a single model.safetensors or shards listed by
// model.safetensors.index.json. Hand-written because no Debian package reads the format;
// the header is validated completely (offsets, sizes, dtypes) before any tensor is touched.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/mmap_file.h"

namespace mlaserve {

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // points into the mapped file
  size_t nbytes = 0;
  std::string file;       // for messages
  std::string gguf_name;  // the GGUF tensor it was read from, for messages ("" in safetensors)

  int64_t numel() const;
  std::string shape_string() const;  // "[8, 256]"
};

std::string shape_string(const std::vector<int64_t>& shape);
// The element count of `shape`; throws Error naming `where` for a negative dimension or overflow.
int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where);

// One mapped .safetensors file with its parsed header.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws Error naming file and problem
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const MappedFile& file() const { return *file_; }

 private:
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
};

class GgufTensors;

// All tensors of a checkpoint directory, or of a GGUF file under the names its Hugging Face
// twin has (io/gguf_model.h). Tracks which tensors the model consumed so that unexpected extra
// tensors are reported.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& directory);  // a directory, or a .gguf file
  ~Checkpoint();

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorInfo& get(const std::string& name);  // marks used; throws "missing tensor"
  std::vector<std::string> unused_names() const;
  const std::map<std::string, const TensorInfo*>& all() const { return tensors_; }
  const std::string& directory() const { return directory_; }
  // MappedFile::release for bytes that lie in one of the checkpoint's files (else nothing).
  void release_pages(const void* begin, size_t bytes) const;

 private:
  std::string directory_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unique_ptr<GgufTensors> gguf_;
  std::map<std::string, const TensorInfo*> tensors_;
  std::set<std::string> used_;
};

}  // namespace mlaserve
