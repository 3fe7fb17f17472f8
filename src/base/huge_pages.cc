#include "base/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "base/error.h"

namespace mlaserve {

uint8_t* allocate_huge_page_bytes(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  auto* block = static_cast<uint8_t*>(std::aligned_alloc(kHugePageBytes, bytes));
  MLA_CHECK(block != nullptr, "out of memory allocating {} bytes", bytes);
  madvise(block, bytes, MADV_HUGEPAGE);  // advice only: no error if refused
  return block;
}

void FreeHugePages::operator()(void* block) const { std::free(block); }

}  // namespace mlaserve
