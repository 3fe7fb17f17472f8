#include "engine/draft_cache.h"

#include <algorithm>

#include "base/error.h"

namespace mlaserve {
namespace {

int64_t pool_blocks(const DraftBudget& budget) {
  const int64_t tokens = budget.cache_tokens + budget.max_sequences * (budget.max_draft_tokens + budget.block_size);
  return (tokens + budget.block_size - 1) / budget.block_size;
}

// A drafter's cache keeps bf16 under an fp8 target cache: its rows need not be MLA latents
// (a block draft's are hidden states) and drafts only propose, so it is kept simple.
CacheDType draft_dtype(CacheDType target) { return target == CacheDType::FP8 ? CacheDType::BF16 : target; }

}  // namespace

DraftCache::DraftCache(const DraftBudget& budget, int64_t layers, int64_t latent_dim)
    : budget_(budget),
      layers_(layers),
      latent_dim_(latent_dim),
      dtype_(draft_dtype(budget.cache_dtype)),
      bytes_(size_t(pool_blocks(budget) * budget.block_size * layers * cache_row_bytes(dtype_, latent_dim, 0))),
      blocks_(pool_blocks(budget), budget.block_size),
      pool_(std::make_unique<uint8_t[]>(bytes_)) {}

std::optional<DraftCache::Reservation> DraftCache::reserve(int64_t id, std::span<const int32_t> tokens,
                                                           int64_t positions,
                                                           const std::function<bool(int64_t)>& idle) {
  for (;;) {
    auto table = tables_.find(id);
    if (table == tables_.end()) {
      if (auto allocation = blocks_.allocate(tokens, positions)) {
        tables_[id] = std::move(allocation->blocks);
        return Reservation{true, allocation->cached_tokens};
      }
    } else if (blocks_.grow(table->second, positions)) {
      return Reservation{};
    }
    const auto victim = std::find_if(tables_.begin(), tables_.end(),
                                     [&](const auto& entry) { return entry.first != id && idle(entry.first); });
    if (victim == tables_.end()) return std::nullopt;
    blocks_.release(victim->second);
    tables_.erase(victim);
  }
}

LatentCacheView DraftCache::view(int64_t id) const {
  const std::vector<int32_t>& table = tables_.at(id);
  return LatentCacheView{pool_.get(),        dtype_,  table.data(), int64_t(table.size()),
                         budget_.block_size, layers_, latent_dim_};
}

void DraftCache::publish(int64_t id, std::span<const int32_t> tokens, int64_t n) {
  blocks_.publish(tables_.at(id), tokens, n);
}

void DraftCache::release(int64_t id) {
  const auto table = tables_.find(id);
  if (table == tables_.end()) return;
  blocks_.release(table->second);
  tables_.erase(table);
}

}  // namespace mlaserve
