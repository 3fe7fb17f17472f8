#include "engine/block_manager.h"

#include <algorithm>
#include <bit>

#include "base/error.h"

namespace mlaserve {

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size) : block_size_(block_size) {
  MLA_CHECK(n_blocks > 0 && block_size > 0, "the KV cache needs at least one block of one token");
  MLA_CHECK(n_blocks < (int64_t(1) << 30), "the KV cache has {} blocks; at most 2^30 are supported", n_blocks);
  blocks_.resize(size_t(n_blocks));
  block_tokens_.resize(size_t(n_blocks * block_size));
  index_.assign(std::bit_ceil(size_t(2 * n_blocks)), kNone);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

void BlockManager::lru_append(int32_t id) {
  Block& block = blocks_[size_t(id)];
  block.lru_prev = lru_back_;
  block.lru_next = kNone;
  (lru_back_ == kNone ? lru_front_ : blocks_[size_t(lru_back_)].lru_next) = id;
  lru_back_ = id;
  ++n_evictable_;
}

void BlockManager::lru_remove(int32_t id) {
  Block& block = blocks_[size_t(id)];
  (block.lru_prev == kNone ? lru_front_ : blocks_[size_t(block.lru_prev)].lru_next) = block.lru_next;
  (block.lru_next == kNone ? lru_back_ : blocks_[size_t(block.lru_next)].lru_prev) = block.lru_prev;
  block.lru_prev = block.lru_next = kNone;
  --n_evictable_;
}

int32_t BlockManager::index_find(uint64_t hash) const {
  for (size_t slot = slot_of(hash);; slot = (slot + 1) & (index_.size() - 1)) {
    const int32_t id = index_[slot];
    if (id == kNone || blocks_[size_t(id)].hash == hash) return id;
  }
}

void BlockManager::index_insert(int32_t id) {
  size_t slot = slot_of(blocks_[size_t(id)].hash);
  while (index_[slot] != kNone) slot = (slot + 1) & (index_.size() - 1);
  index_[slot] = id;
}

// Removes the entry, then moves later entries of its probe run back into the hole, so every
// entry stays reachable from its home slot without tombstones.
void BlockManager::index_erase(uint64_t hash) {
  const size_t mask = index_.size() - 1;
  size_t hole = slot_of(hash);
  while (blocks_[size_t(index_[hole])].hash != hash) hole = (hole + 1) & mask;
  for (size_t slot = (hole + 1) & mask; index_[slot] != kNone; slot = (slot + 1) & mask) {
    const size_t home = slot_of(blocks_[size_t(index_[slot])].hash);
    if (((slot - home) & mask) >= ((slot - hole) & mask)) {  // home is at or before the hole
      index_[hole] = index_[slot];
      hole = slot;
    }
  }
  index_[hole] = kNone;
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
    const int32_t id = index_find(hash);
    if (id == kNone || !std::ranges::equal(block_tokens, tokens_of(id))) break;
    hits.push_back(id);
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
    id = lru_front_;
    if (on_evict_) on_evict_(id, blocks_[size_t(id)].hash, tokens_of(id));
    lru_remove(id);
    index_erase(blocks_[size_t(id)].hash);
    blocks_[size_t(id)].published = false;
  }
  blocks_[id].refs = 1;
  return id;
}

std::optional<BlockManager::Allocation> BlockManager::allocate(std::span<const int32_t> tokens, int64_t n_positions) {
  const int64_t reusable = std::max<int64_t>(0, (int64_t(tokens.size()) - 1) / block_size_);
  const std::vector<int32_t> hits = lookup(tokens, reusable);
  int64_t hits_evictable = 0;
  for (int32_t id : hits) hits_evictable += blocks_[id].refs == 0;
  const int64_t needed = blocks_for(n_positions) - int64_t(hits.size());
  if (needed > available_blocks() - hits_evictable) return std::nullopt;
  Allocation allocation;
  for (int32_t id : hits) {
    Block& block = blocks_[id];
    if (block.refs++ == 0) lru_remove(id);
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

void BlockManager::publish(std::span<const int32_t> table, std::span<const int32_t> tokens, int64_t n_computed) {
  uint64_t hash = 0;
  const int64_t full_blocks = std::min<int64_t>(n_computed / block_size_, int64_t(table.size()));
  for (int64_t b = 0; b < full_blocks; ++b) {
    const auto block_tokens = tokens.subspan(size_t(b * block_size_), size_t(block_size_));
    hash = chain_hash(hash, block_tokens);
    Block& block = blocks_[table[b]];
    if (block.published || index_find(hash) != kNone) continue;  // already known (maybe another copy)
    block.published = true;
    block.hash = hash;
    std::ranges::copy(block_tokens, block_tokens_.begin() + table[b] * block_size_);
    index_insert(table[b]);
  }
}

int64_t BlockManager::adopt(std::span<const int32_t> tokens, int64_t n, int64_t count, const BlockFill& fill) {
  std::vector<int32_t> pinned = lookup(tokens, n);  // then the adopted blocks, pinned until the end
  MLA_CHECK(int64_t(pinned.size()) == n, "internal: adopting block {} of a prefix with {} cached", n, pinned.size());
  for (int32_t id : pinned)
    if (blocks_[size_t(id)].refs++ == 0) lru_remove(id);
  uint64_t hash = n > 0 ? blocks_[size_t(pinned.back())].hash : 0;
  int64_t adopted = 0;
  for (int64_t b = n; b < n + count && available_blocks() > 0; ++b, ++adopted) {
    const auto block_tokens = tokens.subspan(size_t(b * block_size_), size_t(block_size_));
    hash = chain_hash(hash, block_tokens);
    if (index_find(hash) != kNone) break;  // another copy is cached
    const int32_t id = take_block();
    if (!fill(id, b, hash)) {
      blocks_[size_t(id)].refs = 0;
      free_.push_back(id);
      break;
    }
    Block& block = blocks_[size_t(id)];
    block.published = true;
    block.hash = hash;
    std::ranges::copy(block_tokens, block_tokens_.begin() + id * block_size_);
    index_insert(id);
    pinned.push_back(id);
  }
  release(pinned);
  return adopted;
}

void BlockManager::visit_cached(const EvictionHook& visit) const {
  for (int32_t id = 0; id < int32_t(blocks_.size()); ++id)
    if (blocks_[size_t(id)].published) visit(id, blocks_[size_t(id)].hash, tokens_of(id));
}

void BlockManager::release(std::vector<int32_t>& table) {
  for (int32_t id : table) {
    Block& block = blocks_[id];
    MLA_CHECK(block.refs > 0, "internal: block {} released more often than taken", id);
    if (--block.refs > 0) continue;
    if (block.published)
      lru_append(id);
    else
      free_.push_back(id);
  }
  table.clear();
}

}  // namespace mlaserve
