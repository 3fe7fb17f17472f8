// Memory in 2 MB-aligned blocks with transparent huge pages asked for: a page fault every 2 MB
// instead of every 4 KB when first touched, and no TLB miss every 4 KB when streamed. The
// advice may be refused (THP off): the memory is then on 4 KB pages and works the same.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace mlaserve {

constexpr size_t kHugePageBytes = size_t(2) << 20;

struct FreeHugePages {
  void operator()(void* block) const;
};
template <class T>
using HugePageArray = std::unique_ptr<T[], FreeHugePages>;

// `bytes` (rounded up to 2 MB) of uninitialised memory; throws Error when out of memory.
uint8_t* allocate_huge_page_bytes(size_t bytes);

template <class T>
HugePageArray<T> allocate_huge_pages(size_t count) {
  return HugePageArray<T>(reinterpret_cast<T*>(allocate_huge_page_bytes(count * sizeof(T))));
}

}  // namespace mlaserve
