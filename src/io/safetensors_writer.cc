#include "io/safetensors_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace mlaserve {
namespace {

using json = nlohmann::json;

size_t byte_size(const TensorToWrite& tensor) {
  size_t count = 1;
  for (int64_t dim : tensor.shape) count *= size_t(dim);
  return count * dtype_size(tensor.dtype);
}

void write_shard(const std::string& path, const std::vector<const TensorToWrite*>& tensors,
                 const std::function<void()>& on_tensor) {
  json header = json::object();
  size_t offset = 0;
  for (const auto* tensor : tensors) {
    const size_t size = byte_size(*tensor);
    header[tensor->name] = {
        {"dtype", dtype_name(tensor->dtype)}, {"shape", tensor->shape}, {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // align data to 8 bytes
  std::ofstream out(path, std::ios::binary);
  MLA_CHECK(out.good(), "cannot write '{}'", path);
  uint64_t header_len = header_text.size();
  char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = char((header_len >> (8 * i)) & 0xff);
  out.write(len_bytes, 8);
  out.write(header_text.data(), std::streamsize(header_text.size()));
  std::vector<uint8_t> buffer;
  for (const auto* tensor : tensors) {
    buffer.assign(byte_size(*tensor), 0);
    tensor->fill(buffer.data());
    out.write(reinterpret_cast<const char*>(buffer.data()), std::streamsize(buffer.size()));
    on_tensor();
  }
  MLA_CHECK(out.good(), "error writing '{}' (disk full?)", path);
}

}  // namespace

void write_checkpoint(const std::string& directory, const std::vector<TensorToWrite>& tensors, size_t max_shard_bytes,
                      const std::function<void(size_t, size_t)>& progress) {
  namespace fs = std::filesystem;
  fs::create_directories(directory);
  std::vector<std::vector<const TensorToWrite*>> shards(1);
  size_t shard_bytes = 0;
  for (const auto& tensor : tensors) {
    const size_t size = byte_size(tensor);
    if (max_shard_bytes && shard_bytes > 0 && shard_bytes + size > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&tensor);
    shard_bytes += size;
  }
  size_t done = 0;
  auto on_tensor = [&] {
    if (progress) progress(++done, tensors.size());
  };
  if (shards.size() == 1) {
    write_shard((fs::path(directory) / "model.safetensors").string(), shards[0], on_tensor);
    return;
  }
  json weight_map = json::object();
  size_t total_size = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_shard((fs::path(directory) / name).string(), shards[i], on_tensor);
    for (const auto* tensor : shards[i]) {
      weight_map[tensor->name] = name;
      total_size += byte_size(*tensor);
    }
  }
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::ofstream out((fs::path(directory) / "model.safetensors.index.json").string());
  out << index.dump(2) << "\n";
  MLA_CHECK(out.good(), "cannot write the index in '{}'", directory);
}

}  // namespace mlaserve
