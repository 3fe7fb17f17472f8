#include "engine/model_executor.h"

namespace mlaserve {

// Left uninitialised: every row is written before it is read, and untouched pages cost no memory.
void* SingleRankExecutor::allocate_cache(size_t bytes) {
  pool_.reset(new uint8_t[bytes]);
  return pool_.get();
}

}  // namespace mlaserve
