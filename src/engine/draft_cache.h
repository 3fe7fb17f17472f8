// A model drafter's own paged latent cache: a pool of blocks sized like the target's (plus k
// positions and a partial block a sequence), a block table per sequence id, and a prefix cache
// of full blocks of committed tokens (BlockManager), so sequences that share a prompt share
// its rows. When it runs out of blocks it drops whole sequences the caller says are idle.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/drafter.h"

namespace mlaserve {

class DraftCache {
 public:
  // layers x latent_dim values a position, of budget.cache_dtype (bf16 where that is fp8).
  DraftCache(const DraftBudget& budget, int64_t layers, int64_t latent_dim);
  size_t bytes() const { return bytes_; }
  int64_t tokens() const { return blocks_.total_blocks() * blocks_.block_size(); }

  struct Reservation {
    bool fresh = false;         // the sequence had no blocks: its rows start empty...
    int64_t cached_tokens = 0;  // ...but for this many leading tokens found in the prefix cache
  };
  // Blocks for positions [0, positions) of sequence `id`, whose committed tokens are `tokens`.
  // Out of blocks, drops sequences for which idle(id) is true; nullopt when still short.
  std::optional<Reservation> reserve(int64_t id, std::span<const int32_t> tokens, int64_t positions,
                                     const std::function<bool(int64_t)>& idle);
  bool holds(int64_t id) const { return tables_.count(id) > 0; }
  LatentCacheView view(int64_t id) const;
  // The full blocks of the sequence's first n positions hold `tokens`' rows: reusable prefixes.
  void publish(int64_t id, std::span<const int32_t> tokens, int64_t n);
  void release(int64_t id);

 private:
  DraftBudget budget_;
  int64_t layers_, latent_dim_;
  CacheDType dtype_;
  size_t bytes_;
  BlockManager blocks_;
  std::unique_ptr<uint8_t[]> pool_;
  std::unordered_map<int64_t, std::vector<int32_t>> tables_;
};

}  // namespace mlaserve
