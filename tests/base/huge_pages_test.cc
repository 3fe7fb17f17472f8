// Huge-page blocks: 2 MB-aligned, zero-filled, rounded up to 2 MB, and unmapped when freed even
// after malloc's dynamic mmap threshold has risen (so memory placed on a NUMA node never returns
// to the heap with that node's policy).
#include "base/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <vector>

namespace mlaserve {
namespace {

bool mapped(const void* block, size_t bytes) {
  std::vector<unsigned char> flags(bytes / size_t(sysconf(_SC_PAGESIZE)));
  return mincore(const_cast<void*>(block), bytes, flags.data()) == 0 || errno != ENOMEM;
}

TEST(HugePages, BlocksAreAlignedZeroedAndRoundedUp) {
  for (const size_t bytes : {size_t(1), kHugePageBytes, kHugePageBytes + 1, 5 * kHugePageBytes / 2}) {
    const HugePageArray<uint8_t> block = allocate_huge_page_bytes(bytes);
    const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(block.get()) % kHugePageBytes, 0u) << bytes;
    EXPECT_EQ(block.get_deleter().bytes, rounded) << bytes;
    size_t nonzero = 0;
    for (size_t i = 0; i < rounded; ++i) nonzero += block[i] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes;
    block[rounded - 1] = 1;  // the whole rounded block is writable
  }
}

TEST(HugePages, AFreedBlockIsUnmappedWhateverMallocsThreshold) {
  // Freeing a large malloc'd block raises glibc's mmap threshold, after which malloc serves
  // 4 MB from its heap and keeps it mapped when freed.
  void* volatile large = std::malloc(size_t(16) << 20);
  std::free(large);
  const size_t bytes = 2 * kHugePageBytes;
  HugePageArray<float> block = allocate_huge_pages<float>(bytes / sizeof(float));
  block[bytes / sizeof(float) - 1] = 1.0f;
  const void* address = block.get();
  ASSERT_TRUE(mapped(address, bytes));
  block.reset();
  EXPECT_FALSE(mapped(address, bytes));
}

}  // namespace
}  // namespace mlaserve
