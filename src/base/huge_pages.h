// Memory in 2 MB-aligned blocks with transparent huge pages asked for: a page fault every 2 MB
// instead of every 4 KB when first touched, and no TLB miss every 4 KB when streamed. The
// advice may be refused (THP off): the memory is then on 4 KB pages and works the same.
// Blocks are mapped from the kernel and unmapped when freed, never recycled by malloc, so memory
// placed on a NUMA node (mbind) never comes back to the heap carrying that node's policy.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mlaserve {

constexpr size_t kHugePageBytes = size_t(2) << 20;

struct FreeHugePages {
  size_t bytes = 0;  // the mapping's length
  void operator()(void* block) const;
};
template <class T>
using HugePageArray = std::unique_ptr<T[], FreeHugePages>;

// `bytes` (rounded up to 2 MB) of zero-filled memory; throws Error when out of memory.
HugePageArray<uint8_t> allocate_huge_page_bytes(size_t bytes);

template <class T>
HugePageArray<T> allocate_huge_pages(size_t count) {
  HugePageArray<uint8_t> bytes = allocate_huge_page_bytes(count * sizeof(T));
  const FreeHugePages free = bytes.get_deleter();
  return HugePageArray<T>(reinterpret_cast<T*>(bytes.release()), free);
}

}  // namespace mlaserve
