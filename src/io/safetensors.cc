#include "io/safetensors.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/gguf_model.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit

TensorInfo parse_entry(const std::string& name, const json& entry, const uint8_t* data_start, uint64_t data_size,
                       const std::string& path) {
  const std::string where = fmt::format("'{}': tensor '{}'", path, name);
  MLA_CHECK(entry.is_object(), "{}: header entry is not an object", where);
  MLA_CHECK(entry.contains("dtype") && entry["dtype"].is_string(), "{}: missing dtype", where);
  MLA_CHECK(entry.contains("shape") && entry["shape"].is_array(), "{}: missing shape", where);
  const auto& offsets = entry.value("data_offsets", json());
  MLA_CHECK(
      offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
      "{}: data_offsets must be two non-negative integers", where);
  TensorInfo info;
  info.name = name;
  info.file = path;
  try {
    info.dtype = dtype_from_name(entry["dtype"].get<std::string>());
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  for (const auto& dim : entry["shape"]) {
    MLA_CHECK(dim.is_number_integer(), "{}: shape has a non-integer dimension", where);
    info.shape.push_back(dim.get<int64_t>());
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  MLA_CHECK(begin <= end && end <= data_size, "{}: data_offsets [{}, {}] outside the {} data bytes (truncated file?)",
            where, begin, end, data_size);
  const int64_t numel = checked_numel(info.shape, where);
  MLA_CHECK(uint64_t(numel) <= (end - begin) / dtype_size(info.dtype) &&
                uint64_t(numel) * dtype_size(info.dtype) == end - begin,
            "{}: shape {} of {} needs {} bytes but data_offsets span {}", where, info.shape_string(),
            dtype_name(info.dtype), numel * int64_t(dtype_size(info.dtype)), end - begin);
  info.data = data_start + begin;
  info.nbytes = end - begin;
  return info;
}

}  // namespace

int64_t checked_numel(const std::vector<int64_t>& shape, const std::string& where) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    MLA_CHECK(dim >= 0, "{}: negative dimension in shape {}", where, shape_string(shape));
    MLA_CHECK(dim == 0 || count <= std::numeric_limits<int64_t>::max() / dim, "{}: shape {} overflows", where,
              shape_string(shape));
    count *= dim;
  }
  return count;
}

int64_t TensorInfo::numel() const { return checked_numel(shape, name); }
std::string TensorInfo::shape_string() const { return mlaserve::shape_string(shape); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  const size_t size = file_->size();
  MLA_CHECK(size >= 8, "'{}': {} bytes is too short for a safetensors header", path, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file_->data()[i];
  MLA_CHECK(header_len <= kMaxHeaderBytes && header_len <= size - 8,
            "'{}': header length {} exceeds the file ({} bytes): corrupt or truncated", path, header_len, size);
  const char* header_begin = reinterpret_cast<const char*>(file_->data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    fail("'{}': corrupt safetensors header (not valid JSON): {}", path, e.what());
  }
  MLA_CHECK(header.is_object(), "'{}': safetensors header is not a JSON object", path);
  const uint8_t* data_start = file_->data() + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    tensors_.emplace(name, parse_entry(name, entry, data_start, data_size, path));
  }
}

void Checkpoint::release_pages(const void* begin, size_t bytes) const {
  for (const auto& file : files_)
    if (file->file().contains(begin)) file->file().release(begin, bytes);
  if (gguf_) gguf_->release_pages(begin, bytes);
}

Checkpoint::~Checkpoint() = default;

Checkpoint::Checkpoint(const std::string& directory) : directory_(directory) {
  namespace fs = std::filesystem;
  if (is_gguf_path(directory)) {
    gguf_ = std::make_unique<GgufTensors>(directory);
    for (const auto& [name, info] : gguf_->tensors()) tensors_.emplace(name, &info);
    return;
  }
  const fs::path dir(directory);
  const fs::path index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file
  if (fs::exists(index_path)) {
    json index;
    try {
      index = json::parse(read_text_file(index_path.string()));
    } catch (const json::exception& e) {
      fail("'{}': not valid JSON: {}", index_path.string(), e.what());
    }
    MLA_CHECK(index.contains("weight_map") && index["weight_map"].is_object(), "'{}': missing 'weight_map'",
              index_path.string());
    for (const auto& [name, file] : index["weight_map"].items()) {
      MLA_CHECK(file.is_string(), "'{}': weight_map['{}'] is not a file name", index_path.string(), name);
      weight_map[name] = file.get<std::string>();
    }
  } else {
    MLA_CHECK(fs::exists(dir / "model.safetensors"),
              "'{}' has neither model.safetensors nor model.safetensors.index.json", directory);
  }
  std::set<std::string> shard_names;
  for (const auto& [name, file] : weight_map) shard_names.insert(file);
  if (weight_map.empty()) shard_names.insert("model.safetensors");
  for (const auto& shard : shard_names) {
    MLA_CHECK(shard.find('/') == std::string::npos, "shard name '{}' must be a plain file name", shard);
    files_.push_back(std::make_unique<SafetensorsFile>((dir / shard).string()));
    for (const auto& [name, info] : files_.back()->tensors()) {
      if (!weight_map.empty()) {
        auto listed = weight_map.find(name);
        MLA_CHECK(listed != weight_map.end() && listed->second == shard,
                  "tensor '{}' is in '{}' but the index maps it elsewhere", name, shard);
      }
      MLA_CHECK(tensors_.emplace(name, &info).second, "tensor '{}' appears in two shards", name);
    }
  }
  for (const auto& [name, file] : weight_map)
    MLA_CHECK(tensors_.count(name), "index lists tensor '{}' in '{}' but the shard lacks it", name, file);
}

const TensorInfo& Checkpoint::get(const std::string& name) {
  auto found = tensors_.find(name);
  MLA_CHECK(found != tensors_.end(), "missing tensor '{}' in checkpoint '{}'", name, directory_);
  used_.insert(name);
  return *found->second;
}

std::vector<std::string> Checkpoint::unused_names() const {
  std::vector<std::string> unused;
  for (const auto& [name, info] : tensors_)
    if (!used_.count(name)) unused.push_back(name);
  return unused;
}

}  // namespace mlaserve
