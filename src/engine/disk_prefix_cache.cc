#include "engine/disk_prefix_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace mlaserve {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'L', 'A', 'B', 'L', 'O', 'C', 'K'};
constexpr uint32_t kVersion = 1;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t block_size;
  uint64_t model_key, hash, payload_bytes, checksum;
};  // then block_size int32 tokens, then the payload

// A 64-bit hash of bytes, 8 at a time (FNV-1a's prime, with a shift to mix high bits down):
// a checksum against torn and corrupt files, and the model key's mixer; not cryptographic.
uint64_t mix(uint64_t hash, const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, bytes + i, std::min<size_t>(8, n - i));
    hash = (hash ^ word) * 0x100000001b3ull;
    hash ^= hash >> 29;
  }
  return (hash ^ n) * 0x9e3779b97f4a7c15ull;
}

constexpr uint64_t kSeed = 0xcbf29ce484222325ull;

// The bytes at `offset` of an open file, up to `n` (fewer at its end).
std::string bytes_at(std::ifstream& file, uint64_t offset, size_t n) {
  std::string out(n, '\0');
  file.seekg(std::streamoff(offset));
  file.read(out.data(), std::streamsize(n));
  out.resize(size_t(std::max<std::streamsize>(0, file.gcount())));
  file.clear();
  return out;
}

}  // namespace

uint64_t model_cache_key(const std::string& model_dir, const std::string& cache_layout) {
  uint64_t key = mix(kSeed, cache_layout.data(), cache_layout.size());
  std::vector<fs::path> files;
  if (fs::is_regular_file(model_dir)) {  // a GGUF
    files.push_back(model_dir);
  } else {
    for (const auto& entry : fs::directory_iterator(model_dir)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && (name.ends_with(".json") || name.ends_with(".safetensors") ||
                                      name.ends_with(".model") || name.ends_with(".tiktoken")))
        files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& path : files) {
    const std::string name = path.filename().string();
    const uint64_t size = fs::file_size(path);
    key = mix(key, name.data(), name.size());
    key = mix(key, &size, sizeof size);
    std::ifstream file(path, std::ios::binary);
    if (!name.ends_with(".safetensors") && !name.ends_with(".gguf")) {  // configs and tokenizers whole
      const std::string text = bytes_at(file, 0, size_t(size));
      key = mix(key, text.data(), text.size());
      continue;
    }
    // Weights: the header (names, dtypes, offsets) and 16 samples of 4 KiB spread over the
    // data, so a retrained checkpoint of the same shapes is another model, without reading
    // a terabyte at start-up.
    // a GGUF: its first 8 MiB hold the keys, the tokenizer and the tensor infos.
    uint64_t header_bytes = 8 << 20;
    const std::string length = bytes_at(file, 0, 8);
    if (length.size() == 8 && name.ends_with(".safetensors")) std::memcpy(&header_bytes, length.data(), 8);
    const std::string header = bytes_at(file, 8, size_t(std::min<uint64_t>(header_bytes, size)));
    key = mix(key, header.data(), header.size());
    for (uint64_t sample = 0; sample < 16; ++sample) {
      const std::string data = bytes_at(file, size * sample / 16, 4096);
      key = mix(key, data.data(), data.size());
    }
  }
  return key;
}

DiskPrefixCache::DiskPrefixCache(DiskPrefixCacheConfig config, int64_t block_size, int64_t block_bytes)
    : config_(std::move(config)), block_size_(block_size), block_bytes_(block_bytes) {
  std::error_code error;
  fs::create_directories(config_.dir, error);
  MLA_CHECK(!error && fs::is_directory(config_.dir), "--prefix-cache-dir {}: {}", config_.dir,
            error ? error.message() : "not a directory");
  // This model's files, oldest first by modification time.
  const std::string prefix = fmt::format("{:016x}-", config_.model_key);
  std::vector<std::pair<fs::file_time_type, fs::path>> found;
  for (const auto& entry : fs::directory_iterator(config_.dir, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.starts_with(prefix) && name.ends_with(".block"))
      found.emplace_back(entry.last_write_time(), entry.path());
  }
  MLA_CHECK(!error, "--prefix-cache-dir {}: {}", config_.dir, error.message());
  std::sort(found.begin(), found.end());
  for (const auto& [time, path] : found) {
    const std::string hex = path.stem().string().substr(prefix.size());
    uint64_t hash = 0;
    if (hex.size() == 16 && std::sscanf(hex.c_str(), "%16lx", &hash) == 1)
      remember(hash, int64_t(fs::file_size(path, error)));
  }
  keep_to_budget();
  spdlog::info("prefix cache on disk: {} blocks of this model, {:.2f} of {:.2f} GiB in {}", files_.size(),
               double(total_bytes_) / double(1 << 30), double(config_.budget_bytes) / double(1 << 30), config_.dir);
}

fs::path DiskPrefixCache::path_of(uint64_t hash) const {
  return fs::path(config_.dir) / fmt::format("{:016x}-{:016x}.block", config_.model_key, hash);
}

int64_t DiskPrefixCache::file_bytes() const {
  return int64_t(sizeof(Header)) + block_size_ * int64_t(sizeof(int32_t)) + block_bytes_;
}

void DiskPrefixCache::remember(uint64_t hash, int64_t bytes) {
  if (auto found = files_.find(hash); found != files_.end()) {
    by_age_.erase(found->second.second);
    total_bytes_ -= found->second.first;
  }
  files_[hash] = {bytes, next_stamp_};
  by_age_[next_stamp_++] = hash;
  total_bytes_ += bytes;
}

void DiskPrefixCache::forget(uint64_t hash, const std::string& why) {
  if (!why.empty()) spdlog::warn("prefix cache on disk: {} {}: removed", path_of(hash).string(), why);
  std::error_code error;
  fs::remove(path_of(hash), error);
  if (auto found = files_.find(hash); found != files_.end()) {
    by_age_.erase(found->second.second);
    total_bytes_ -= found->second.first;
    files_.erase(found);
  }
}

void DiskPrefixCache::keep_to_budget() {
  while (total_bytes_ > config_.budget_bytes && !by_age_.empty()) forget(by_age_.begin()->second, "");
}

void DiskPrefixCache::write(uint64_t hash, std::span<const int32_t> tokens, const void* payload) {
  if (contains(hash) || file_bytes() > config_.budget_bytes) return;
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kVersion;
  header.block_size = uint32_t(block_size_);
  header.model_key = config_.model_key;
  header.hash = hash;
  header.payload_bytes = uint64_t(block_bytes_);
  header.checksum = mix(kSeed, payload, size_t(block_bytes_));
  // Written whole to a temporary name, then renamed: a reader never sees half a file.
  const fs::path path = path_of(hash), temporary = fs::path(path.string() + ".tmp");
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char*>(&header), sizeof header);
    file.write(reinterpret_cast<const char*>(tokens.data()), std::streamsize(tokens.size_bytes()));
    file.write(static_cast<const char*>(payload), std::streamsize(block_bytes_));
    if (!file) {
      spdlog::warn("prefix cache on disk: cannot write {}", temporary.string());
      std::error_code error;
      fs::remove(temporary, error);
      return;
    }
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) return;
  written_bytes_ += file_bytes();
  remember(hash, file_bytes());
  keep_to_budget();
}

bool DiskPrefixCache::read(uint64_t hash, std::span<const int32_t> tokens, void* payload) {
  if (!contains(hash)) return false;
  std::ifstream file(path_of(hash), std::ios::binary);
  buffer_.resize(size_t(file_bytes()));
  file.read(reinterpret_cast<char*>(buffer_.data()), std::streamsize(buffer_.size()));
  const bool whole = file && file.gcount() == std::streamsize(buffer_.size()) && file.peek() == EOF;
  Header header;
  std::memcpy(&header, buffer_.data(), std::min(sizeof header, buffer_.size()));
  const uint8_t* stored_tokens = buffer_.data() + sizeof header;
  const uint8_t* stored = stored_tokens + tokens.size_bytes();
  const char* problem = !whole ? "is truncated or not a block of this size"
                        : std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 || header.version != kVersion
                            ? "is not a prefix-cache block of this version"
                        : header.model_key != config_.model_key || header.hash != hash ||
                                header.block_size != uint32_t(block_size_) ||
                                header.payload_bytes != uint64_t(block_bytes_)
                            ? "belongs to another model or block"
                        : std::memcmp(stored_tokens, tokens.data(), tokens.size_bytes()) != 0 ? "holds other tokens"
                        : header.checksum != mix(kSeed, stored, size_t(block_bytes_))         ? "fails its checksum"
                                                                                              : nullptr;
  if (problem) {
    forget(hash, problem);
    return false;
  }
  std::memcpy(payload, stored, size_t(block_bytes_));
  read_bytes_ += file_bytes();
  std::error_code error;
  fs::last_write_time(path_of(hash), fs::file_time_type::clock::now(), error);  // newest again
  remember(hash, file_bytes());
  return true;
}

}  // namespace mlaserve
