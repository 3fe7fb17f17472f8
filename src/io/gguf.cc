#include "io/gguf.h"

#include <cstring>
#include <filesystem>
#include <limits>

#include "base/error.h"
#include "io/safetensors.h"  // shape_string, checked_numel

namespace mlaserve {
namespace {

using json = nlohmann::json;

// GGUF's metadata value types, by their ids.
enum ValueType : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Reads the header in order, every read checked against the file's end.
class Cursor {
 public:
  Cursor(const MappedFile& file) : file_(file) {}
  size_t position() const { return position_; }
  size_t left() const { return file_.size() - position_; }

  template <typename T>
  T scalar(const char* what) {
    MLA_CHECK(left() >= sizeof(T), "'{}': truncated at byte {} reading {}", file_.path(), position_, what);
    T value;
    std::memcpy(&value, file_.data() + position_, sizeof(T));
    position_ += sizeof(T);
    return value;
  }
  std::string string(const char* what) {
    const uint64_t length = scalar<uint64_t>(what);
    MLA_CHECK(length <= left(), "'{}': {} of {} bytes at byte {} runs past the end of the file", file_.path(), what,
              length, position_);
    std::string text(reinterpret_cast<const char*>(file_.data() + position_), length);
    position_ += length;
    return text;
  }
  json value(uint32_t type, const std::string& key, bool in_array = false);

 private:
  const MappedFile& file_;
  size_t position_ = 0;
};

json Cursor::value(uint32_t type, const std::string& key, bool in_array) {
  switch (type) {
    case kU8: return scalar<uint8_t>(key.c_str());
    case kI8: return scalar<int8_t>(key.c_str());
    case kU16: return scalar<uint16_t>(key.c_str());
    case kI16: return scalar<int16_t>(key.c_str());
    case kU32: return scalar<uint32_t>(key.c_str());
    case kI32: return scalar<int32_t>(key.c_str());
    case kU64: return scalar<uint64_t>(key.c_str());
    case kI64: return scalar<int64_t>(key.c_str());
    case kF32: return scalar<float>(key.c_str());
    case kF64: return scalar<double>(key.c_str());
    case kBool: {
      const uint8_t flag = scalar<uint8_t>(key.c_str());
      MLA_CHECK(flag <= 1, "'{}': key '{}': boolean byte {}", file_.path(), key, flag);
      return flag == 1;
    }
    case kString: return string(key.c_str());
    case kArray: {
      MLA_CHECK(!in_array, "'{}': key '{}': an array of arrays", file_.path(), key);
      const uint32_t element_type = scalar<uint32_t>(key.c_str());
      const uint64_t count = scalar<uint64_t>(key.c_str());
      // Every element takes at least a byte (a string its 8-byte length): no count past the file.
      MLA_CHECK(count <= left(), "'{}': key '{}': {} elements cannot fit in the {} bytes left", file_.path(), key,
                count, left());
      json array = json::array();
      for (uint64_t i = 0; i < count; ++i) array.push_back(value(element_type, key, true));
      return array;
    }
  }
  fail("'{}': key '{}': unknown value type {}", file_.path(), key, type);
}

// A tensor info: name, dims (ne, innermost first), type, offset into the data section.
GgufTensor tensor_info(Cursor& cursor, const std::string& path, uint64_t& offset) {
  GgufTensor tensor;
  tensor.file = path;
  tensor.name = cursor.string("a tensor name");
  const std::string where = fmt::format("'{}': tensor '{}'", path, tensor.name);
  const uint32_t n_dims = cursor.scalar<uint32_t>("a tensor's dimension count");
  MLA_CHECK(n_dims >= 1 && n_dims <= kMaxDims, "{}: {} dimensions (1 to {})", where, n_dims, kMaxDims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    const uint64_t ne = cursor.scalar<uint64_t>("a tensor's dimension");
    MLA_CHECK(ne <= uint64_t(std::numeric_limits<int64_t>::max()), "{}: dimension {} overflows", where, ne);
    tensor.shape.insert(tensor.shape.begin(), int64_t(ne));
  }
  const uint32_t type = cursor.scalar<uint32_t>("a tensor's type");
  const GgmlTypeTraits* traits = ggml_type_traits(type);
  MLA_CHECK(traits,
            "{}: type {} is not supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q6_0, Q8_0, Q2_K, "
            "Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)",
            where, ggml_type_name(type));
  tensor.type = GgmlType(type);
  const int64_t numel = checked_numel(tensor.shape, where);
  MLA_CHECK(tensor.shape.back() % traits->block_size == 0,
            "{}: {} rows of {} elements are not whole {}-element blocks of {}", where,
            numel / std::max<int64_t>(tensor.shape.back(), 1), tensor.shape.back(), traits->block_size, traits->name);
  MLA_CHECK(uint64_t(numel / traits->block_size) <= std::numeric_limits<uint64_t>::max() / traits->block_bytes,
            "{}: shape {} overflows", where, shape_string(tensor.shape));
  tensor.nbytes = size_t(numel / traits->block_size) * traits->block_bytes;
  offset = cursor.scalar<uint64_t>("a tensor's offset");
  return tensor;
}

// An integer key's value, `fallback` when absent; another type is an error naming the key.
int64_t integer_key(const GgufFile& file, const std::string& key, int64_t fallback) {
  const auto found = file.metadata().find(key);
  if (found == file.metadata().end()) return fallback;
  MLA_CHECK(found->is_number_integer() && (!found->is_number_unsigned() || found->get<uint64_t>() <= 1u << 31),
            "'{}': key '{}' is {} where an integer is expected", file.file().path(), key, found->dump());
  return found->get<int64_t>();
}

}  // namespace

int64_t GgufTensor::numel() const { return checked_numel(shape, name); }

GgufFile::GgufFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  Cursor cursor(*file_);
  const uint32_t magic = cursor.scalar<uint32_t>("the magic");
  MLA_CHECK(magic == 0x46554747, "'{}': not a GGUF file (magic {:#010x}, expected \"GGUF\")", path, magic);
  version_ = cursor.scalar<uint32_t>("the version");
  MLA_CHECK(version_ == 2 || version_ == 3, "'{}': GGUF version {} is not supported (2 or 3)", path, version_);
  const uint64_t tensor_count = cursor.scalar<uint64_t>("the tensor count");
  const uint64_t kv_count = cursor.scalar<uint64_t>("the key count");
  // A key takes at least 12 bytes and a tensor info 28: counts past the file are corrupt.
  MLA_CHECK(kv_count <= cursor.left() / 12 && tensor_count <= cursor.left() / 28,
            "'{}': {} keys and {} tensors cannot fit in {} bytes (corrupt header)", path, kv_count, tensor_count,
            file_->size());
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string key = cursor.string("a metadata key");
    MLA_CHECK(!metadata_.contains(key), "'{}': key '{}' appears twice", path, key);
    metadata_[key] = cursor.value(cursor.scalar<uint32_t>(key.c_str()), key);
  }
  uint64_t alignment = 32;
  if (metadata_.contains("general.alignment")) {
    const json& value = metadata_["general.alignment"];
    MLA_CHECK(value.is_number_unsigned() && value.get<uint64_t>() > 0 && value.get<uint64_t>() <= (1u << 30) &&
                  (value.get<uint64_t>() & (value.get<uint64_t>() - 1)) == 0,
              "'{}': general.alignment {} is not a power of two", path, value.dump());
    alignment = value.get<uint64_t>();
  }
  std::vector<uint64_t> offsets(tensor_count);
  std::map<std::string, size_t> seen;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    tensors_.push_back(tensor_info(cursor, path, offsets[i]));
    MLA_CHECK(seen.emplace(tensors_.back().name, i).second, "'{}': tensor '{}' appears twice", path,
              tensors_.back().name);
  }
  const uint64_t data_start = (cursor.position() + alignment - 1) / alignment * alignment;
  MLA_CHECK(tensor_count == 0 || data_start <= file_->size(),
            "'{}': the data section would start at byte {}, past the "
            "end of the file ({} bytes)",
            path, data_start, file_->size());
  const uint64_t data_size = data_start <= file_->size() ? file_->size() - data_start : 0;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor& tensor = tensors_[i];
    MLA_CHECK(offsets[i] % alignment == 0, "'{}': tensor '{}' at offset {} is not aligned to {}", path, tensor.name,
              offsets[i], alignment);
    MLA_CHECK(offsets[i] <= data_size && tensor.nbytes <= data_size - offsets[i],
              "'{}': tensor '{}' ({} bytes at offset {}) runs past the {} data bytes (truncated file?)", path,
              tensor.name, tensor.nbytes, offsets[i], data_size);
    tensor.data = file_->data() + data_start + offsets[i];
  }
}

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0 && !std::filesystem::is_directory(path);
}

std::vector<std::unique_ptr<GgufFile>> open_gguf(const std::string& path) {
  std::vector<std::unique_ptr<GgufFile>> parts;
  parts.push_back(std::make_unique<GgufFile>(path));
  const int64_t count = integer_key(*parts[0], "split.count", 1);
  MLA_CHECK(count >= 1 && count <= 99999, "'{}': split.count {} (1 to 99999)", path, count);
  if (count == 1) return parts;
  // The first part's name, NAME-00001-of-NNNNN.gguf, names the others.
  const std::string first_part = "-00001-of-", digits = "0123456789";
  const size_t tail = first_part.size() + 5 + 5;  // the marker, 5 digits, ".gguf"
  const bool is_first = path.size() > tail && path.ends_with(".gguf") &&
                        path.compare(path.size() - tail, first_part.size(), first_part) == 0 &&
                        path.find_first_not_of(digits, path.size() - 10) == path.size() - 5;
  MLA_CHECK(is_first && std::stoll(path.substr(path.size() - 10, 5)) == count,
            "'{}' is part of a {}-part split set: give its first part, NAME-00001-of-{:05}.gguf", path, count, count);
  const std::string stem = path.substr(0, path.size() - tail);
  std::map<std::string, std::string> tensor_part;
  for (int64_t k = 1; k <= count; ++k) {
    if (k > 1) parts.push_back(std::make_unique<GgufFile>(fmt::format("{}-{:05}-of-{:05}.gguf", stem, k, count)));
    const GgufFile& part = *parts.back();
    MLA_CHECK(integer_key(part, "split.no", -1) == k - 1 && integer_key(part, "split.count", -1) == count,
              "'{}': split.no / split.count do not say part {} of {}", part.file().path(), k, count);
    for (const GgufTensor& tensor : part.tensors())
      MLA_CHECK(tensor_part.emplace(tensor.name, part.file().path()).second, "tensor '{}' is in both '{}' and '{}'",
                tensor.name, tensor_part[tensor.name], part.file().path());
  }
  const int64_t expected = integer_key(*parts[0], "split.tensors.count", int64_t(tensor_part.size()));
  MLA_CHECK(expected == int64_t(tensor_part.size()), "'{}': split.tensors.count is {} but the parts hold {} tensors",
            path, expected, tensor_part.size());
  return parts;
}

}  // namespace mlaserve
