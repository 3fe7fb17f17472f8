#include "engine/block_manager.h"

#include <algorithm>

#include "base/error.h"

namespace mlaserve {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size)
    : block_size_(block_size), blocks_(size_t(n_blocks)) {
  MLA_CHECK(n_blocks > 0 && block_size > 0, "the KV cache needs at least one block of one token");
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

uint64_t BlockManager::chain_hash(uint64_t parent, std::span<const int32_t> tokens) const {
  uint64_t hash = parent ^ 0x9e3779b97f4a7c15ull;
  for (int32_t token : tokens) {
    hash ^= uint64_t(uint32_t(token)) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    hash *= 0xff51afd7ed558ccdull;
  }
  return hash;
}

std::vector<int32_t> BlockManager::lookup(std::span<const int32_t> tokens, int64_t max_blocks) const {
  std::vector<int32_t> hits;
  uint64_t hash = 0;
  for (int64_t b = 0; b < max_blocks; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b * block_size_), size_t(block_size_));
    hash = chain_hash(hash, block_tokens);
    auto found = by_hash_.find(hash);
    if (found == by_hash_.end()) break;
    const Block& block = blocks_[found->second];
    if (!std::equal(block_tokens.begin(), block_tokens.end(), block.tokens.begin(), block.tokens.end())) break;
    hits.push_back(found->second);
  }
  return hits;
}

int64_t BlockManager::cached_prefix_blocks(std::span<const int32_t> tokens) const {
  return int64_t(lookup(tokens, std::max<int64_t>(0, (int64_t(tokens.size()) - 1) / block_size_)).size());
}

uint64_t BlockManager::prefix_hash(std::span<const int32_t> tokens, int64_t n_blocks) const {
  return n_blocks > 0 ? prefix_hashes(tokens, n_blocks).back() : 0;
}

std::vector<uint64_t> BlockManager::prefix_hashes(std::span<const int32_t> tokens, int64_t n_blocks) const {
  std::vector<uint64_t> hashes;
  uint64_t hash = 0;
  for (int64_t b = 0; b < n_blocks; ++b)
    hashes.push_back(hash = chain_hash(hash, tokens.subspan(size_t(b * block_size_), size_t(block_size_))));
  return hashes;
}

int32_t BlockManager::take_block() {
  int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = evictable_.front();
    evictable_.pop_front();
    Block& evicted = blocks_[id];
    by_hash_.erase(evicted.hash);
    evicted.published = false;
    evicted.tokens.clear();
  }
  blocks_[id].refs = 1;
  return id;
}

std::optional<BlockManager::Allocation> BlockManager::allocate(std::span<const int32_t> tokens,
                                                               int64_t n_positions) {
  const int64_t reusable = std::max<int64_t>(0, (int64_t(tokens.size()) - 1) / block_size_);
  const std::vector<int32_t> hits = lookup(tokens, reusable);
  int64_t hits_evictable = 0;
  for (int32_t id : hits) hits_evictable += blocks_[id].refs == 0;
  const int64_t needed = blocks_for(n_positions) - int64_t(hits.size());
  if (needed > available_blocks() - hits_evictable) return std::nullopt;
  Allocation allocation;
  for (int32_t id : hits) {
    Block& block = blocks_[id];
    if (block.refs++ == 0) evictable_.erase(block.lru);
    allocation.blocks.push_back(id);
  }
  for (int64_t i = 0; i < needed; ++i) allocation.blocks.push_back(take_block());
  allocation.cached_tokens = int64_t(hits.size()) * block_size_;
  queried_tokens_ += int64_t(tokens.size());
  hit_tokens_ += allocation.cached_tokens;
  return allocation;
}

bool BlockManager::grow(std::vector<int32_t>& table, int64_t n_positions) {
  const int64_t needed = blocks_for(n_positions) - int64_t(table.size());
  if (needed <= 0) return true;
  if (needed > available_blocks()) return false;
  for (int64_t i = 0; i < needed; ++i) table.push_back(take_block());
  return true;
}

void BlockManager::publish(std::span<const int32_t> table, std::span<const int32_t> tokens,
                           int64_t n_computed) {
  uint64_t hash = 0;
  const int64_t full_blocks = std::min<int64_t>(n_computed / block_size_, int64_t(table.size()));
  for (int64_t b = 0; b < full_blocks; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b * block_size_), size_t(block_size_));
    hash = chain_hash(hash, block_tokens);
    Block& block = blocks_[table[b]];
    if (block.published || by_hash_.count(hash)) continue;  // already known (maybe another copy)
    block.published = true;
    block.hash = hash;
    block.tokens.assign(block_tokens.begin(), block_tokens.end());
    by_hash_[hash] = table[b];
  }
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t id : table) {
    Block& block = blocks_[id];
    MLA_CHECK(block.refs > 0, "internal: block {} released more often than taken", id);
    if (--block.refs > 0) continue;
    if (block.published)
      block.lru = evictable_.insert(evictable_.end(), id);
    else
      free_.push_back(id);
  }
  table.clear();
}

}  // namespace mlaserve
