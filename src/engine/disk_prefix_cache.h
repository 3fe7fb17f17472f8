// The prefix cache's second tier: full blocks of the latent cache kept as files, so a prefix
// computed once is reused after its blocks leave memory, and after a restart. The engine
// writes a block when the pool evicts it and, at shutdown, every cached block not yet on disk;
// it reads a prompt's blocks back before admitting it, past those still in memory.
//
// A file is one block: DIR/<model key>-<prefix hash>.block, both 16 hex digits (the prefix
// hash chains the block's tokens and every token before it, as the in-memory prefix cache
// names blocks). It holds a header (magic, version, model key, prefix hash, block size,
// payload bytes, the block's tokens, a checksum of the payload) and the payload: the pool
// block's bytes, every layer's rows. A file is read only when a prompt asks for its block; one
// that is truncated, corrupt, or names another model or hash is removed with a warning and
// never used. Files past the byte budget go oldest first (read and written files are touched).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace mlaserve {

struct DiskPrefixCacheConfig {
  std::string dir;           // empty: no disk tier
  int64_t budget_bytes = 0;  // files of this model kept at most (oldest dropped first)
  uint64_t model_key = 0;    // identity of the weights, tokenizer and cache layout (model_cache_key)
};

// Identity of what a block's bytes depend on: the model directory's config, tokenizer and
// weight files' headers and sizes, and the cache's dtype and block size, hashed.
uint64_t model_cache_key(const std::string& model_dir, const std::string& cache_layout);

class DiskPrefixCache {
 public:
  // Lists the directory's files of this model (creating the directory), dropping the oldest
  // past the budget. Throws naming the directory when it cannot be made or read.
  DiskPrefixCache(DiskPrefixCacheConfig config, int64_t block_size, int64_t block_bytes);

  bool contains(uint64_t hash) const { return files_.count(hash) > 0; }
  // Writes a block (unless present) and drops the oldest files past the budget.
  void write(uint64_t hash, std::span<const int32_t> tokens, const void* payload);
  // Reads the block `hash` holding `tokens` into `payload` (block_bytes); false, `payload`
  // untouched and the file removed with a warning, when it is missing, truncated, corrupt or
  // another block's.
  bool read(uint64_t hash, std::span<const int32_t> tokens, void* payload);

  int64_t files() const { return int64_t(files_.size()); }
  int64_t bytes() const { return total_bytes_; }
  int64_t written_bytes() const { return written_bytes_; }
  int64_t read_bytes() const { return read_bytes_; }

 private:
  std::filesystem::path path_of(uint64_t hash) const;
  int64_t file_bytes() const;
  void remember(uint64_t hash, int64_t bytes);  // as the newest
  void forget(uint64_t hash, const std::string& why);
  void keep_to_budget();

  DiskPrefixCacheConfig config_;
  int64_t block_size_, block_bytes_;
  // Files by age: hash -> (bytes, age stamp); stamps -> hash, oldest first.
  std::unordered_map<uint64_t, std::pair<int64_t, uint64_t>> files_;
  std::map<uint64_t, uint64_t> by_age_;
  uint64_t next_stamp_ = 0;
  int64_t total_bytes_ = 0, written_bytes_ = 0, read_bytes_ = 0;
  std::vector<uint8_t> buffer_;  // a file's bytes, reused
};

}  // namespace mlaserve
