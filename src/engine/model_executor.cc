#include "engine/model_executor.h"

#include <cstring>

namespace mlaserve {

// Left uninitialised: every row is written before it is read, and untouched pages cost no memory.
void* SingleRankExecutor::allocate_cache(size_t bytes) {
  pool_.reset(new uint8_t[bytes]);
  place_cache_pool(pool_.get(), bytes, numa_nodes_);
  return pool_.get();
}

void copy_within(void* pool, int64_t from, int64_t to, int64_t bytes) {
  std::memmove(static_cast<uint8_t*>(pool) + to, static_cast<const uint8_t*>(pool) + from, size_t(bytes));
}

void SingleRankExecutor::copy_in_cache(int64_t from, int64_t to, int64_t bytes) { copy_within(pool_.get(), from, to, bytes); }

}  // namespace mlaserve
