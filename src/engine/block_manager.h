// Pure bookkeeping for the paged latent cache: which pool blocks are free, which belong to
// which sequences (reference counts), and which full blocks hold a known token prefix
// (prefix cache: a chained hash of the block's tokens and every token before it, verified
// against the stored tokens). Blocks no sequence uses but whose prefix is known stay cached
// until evicted, least recently used first. No model, no threads: unit-tested directly.
#pragma once
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace mlaserve {

class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t total_blocks() const { return int64_t(blocks_.size()); }
  int64_t available_blocks() const { return int64_t(free_.size() + evictable_.size()); }
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
  struct Block {
    int32_t refs = 0;
    bool published = false;
    uint64_t hash = 0;
    std::vector<int32_t> tokens;  // the block's tokens, to verify hash matches
    std::list<int32_t>::iterator lru;  // position in evictable_ when refs == 0 and published
  };
  int32_t take_block();  // a free block, else the least recently used cached one
  uint64_t chain_hash(uint64_t parent, std::span<const int32_t> tokens) const;
  // Cached blocks for the leading full blocks of tokens (at most max_blocks).
  std::vector<int32_t> lookup(std::span<const int32_t> tokens, int64_t max_blocks) const;

  int64_t block_size_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;          // never published, refs == 0
  std::list<int32_t> evictable_;       // published, refs == 0; front = least recently used
  std::unordered_map<uint64_t, int32_t> by_hash_;
  int64_t queried_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace mlaserve
