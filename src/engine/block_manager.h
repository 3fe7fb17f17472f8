// Pure bookkeeping for the paged latent cache: which pool blocks are free, which belong to
// which sequences (reference counts), and which full blocks hold a known token prefix
// (prefix cache: a chained hash of the block's tokens and every token before it, verified
// against the stored tokens). Blocks no sequence uses but whose prefix is known stay cached
// until evicted, least recently used first. No model, no threads: unit-tested directly.
// Everything it keeps is sized to the pool at construction (the blocks' tokens, the LRU list,
// the hash index), so serving allocates nothing here and its memory does not grow.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace mlaserve {

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t total_blocks() const { return int64_t(blocks_.size()); }
  int64_t available_blocks() const { return int64_t(free_.size()) + n_evictable_; }
  int64_t used_blocks() const { return total_blocks() - available_blocks(); }
  int64_t blocks_for(int64_t n_positions) const { return (n_positions + block_size_ - 1) / block_size_; }

  struct Allocation {
    std::vector<int32_t> blocks;  // block table covering n_positions
    int64_t cached_tokens = 0;    // leading tokens whose latents are already in the blocks
  };
  // Blocks for a sequence of n_positions whose known tokens are `tokens`, reusing cached
  // blocks for its leading full blocks (never the block holding the last token, which must
  // be computed to produce logits). nullopt when too few blocks are available.
  std::optional<Allocation> allocate(std::span<const int32_t> tokens, int64_t n_positions);
  // Extends a block table to cover n_positions; false (table unchanged) when out of blocks.
  bool grow(std::vector<int32_t>& table, int64_t n_positions);
  // Records the full blocks among the first n_computed positions as cached prefixes.
  void publish(std::span<const int32_t> table, std::span<const int32_t> tokens, int64_t n_computed);
  // Drops the sequence's references; its published blocks stay cached, the rest are freed.
  void release(std::vector<int32_t>& table);

  // Blocks for full blocks n, n + 1, ... of `tokens` (at most `count`; the first n must be
  // cached and are kept from eviction meanwhile), each taken from the free or evictable ones and
  // handed to fill(id, block index, prefix hash) to fill in (from the disk tier); each it fills
  // is published as that prefix and left cached and unused. Stops at the first it does not fill
  // or when none is left. Returns how many it published.
  using BlockFill = std::function<bool(int32_t id, int64_t block, uint64_t hash)>;
  int64_t adopt(std::span<const int32_t> tokens, int64_t n, int64_t count, const BlockFill& fill);
  // Called with a cached block's id, prefix hash and tokens just before it is evicted for reuse
  // (its rows still in place).
  using EvictionHook = std::function<void(int32_t id, uint64_t hash, std::span<const int32_t> tokens)>;
  void on_evict(EvictionHook hook) { on_evict_ = std::move(hook); }
  // Every cached block (used or not), as the eviction hook sees it.
  void visit_cached(const EvictionHook& visit) const;

  // How many leading full blocks of `tokens` allocate() would reuse now (it never reuses the
  // block holding the last token).
  int64_t cached_prefix_blocks(std::span<const int32_t> tokens) const;
  // The chained hash that names the first n_blocks full blocks of `tokens` as a prefix.
  uint64_t prefix_hash(std::span<const int32_t> tokens, int64_t n_blocks) const;
  // prefix_hash for every n in [1, n_blocks], in one pass.
  std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens, int64_t n_blocks) const;

  int64_t prefix_queried_tokens() const { return queried_tokens_; }
  int64_t prefix_hit_tokens() const { return hit_tokens_; }

 private:
  static constexpr int32_t kNone = -1;
  struct Block {
    int32_t refs = 0;
    bool published = false;
    uint64_t hash = 0;
    int32_t lru_prev = kNone, lru_next = kNone;  // neighbours in the LRU list when evictable
  };
  int32_t take_block();  // a free block, else the least recently used cached one
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  // Cached blocks for the leading full blocks of tokens (at most max_blocks).
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int64_t max_blocks) const;
  std::span<const int32_t> tokens_of(int32_t id) const {
    return std::span(block_tokens_).subspan(size_t(id) * size_t(block_size_), size_t(block_size_));
  }
  // The LRU list of evictable blocks (published, refs == 0): appended at the back, evicted
  // from the front.
  void lru_append(int32_t id);
  void lru_remove(int32_t id);
  // The hash index of published blocks: open addressing with linear probing in a table of at
  // least twice as many slots as blocks (kNone: empty).
  size_t slot_of(uint64_t hash) const { return size_t(hash) & (index_.size() - 1); }
  int32_t index_find(uint64_t hash) const;
  void index_insert(int32_t id);
  void index_erase(uint64_t hash);

  int64_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> block_tokens_;  // [n_blocks, block_size]: a published block's tokens, to verify hash matches
  std::vector<int32_t> free_;          // never published, refs == 0
  int32_t lru_front_ = kNone, lru_back_ = kNone;
  int64_t n_evictable_ = 0;
  std::vector<int32_t> index_;  // block ids by hash
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
  EvictionHook on_evict_;
};

}  // namespace mlaserve
