#include "base/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace mlaserve {

HugePageArray<uint8_t> allocate_huge_page_bytes(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  // Map 2 MB more than asked, then unmap the unaligned head and the tail beyond the block.
  const size_t mapped = bytes + kHugePageBytes;
  void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MLA_CHECK(map != MAP_FAILED, "out of memory allocating {} bytes: {}", bytes, std::strerror(errno));
  auto* start = static_cast<uint8_t*>(map);
  auto* block = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(start) + kHugePageBytes - 1) &
                                           ~uintptr_t(kHugePageBytes - 1));
  if (block > start) munmap(start, size_t(block - start));
  const size_t tail = size_t(start + mapped - (block + bytes));
  if (tail > 0) munmap(block + bytes, tail);
  madvise(block, bytes, MADV_HUGEPAGE);  // advice only: no error if refused
  return HugePageArray<uint8_t>(block, FreeHugePages{bytes});
}

void FreeHugePages::operator()(void* block) const {
  if (block != nullptr) munmap(block, bytes);
}

}  // namespace mlaserve
