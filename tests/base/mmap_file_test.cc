// fault_in_pages: every page a range overlaps is resident afterwards (mincore), across the
// thread pool's shares, with no byte outside the range written, for ranges that start and
// end inside pages.
#include "base/mmap_file.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "base/thread_pool.h"

namespace mlaserve {
namespace {

// Fresh anonymous pages: none resident until written.
struct AnonymousPages {
  explicit AnonymousPages(size_t count) : bytes(count * size_t(sysconf(_SC_PAGESIZE))) {
    data = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (data == MAP_FAILED) data = nullptr;
    if (data) madvise(data, bytes, MADV_NOHUGEPAGE);  // page by page, as counted below
  }
  ~AnonymousPages() {
    if (data) munmap(data, bytes);
  }
  std::vector<bool> resident() const {
    std::vector<unsigned char> flags(bytes / size_t(sysconf(_SC_PAGESIZE)));
    EXPECT_EQ(mincore(data, bytes, flags.data()), 0);
    return {flags.begin(), flags.end()};
  }
  size_t bytes;
  uint8_t* data = nullptr;
};

TEST(FaultInPages, MakesEveryPageOfTheRangeResidentAndNoOther) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE)), pages = 1000;  // several grains of 256 pages
  ScopedThreadPool pool(3);
  AnonymousPages memory(pages);
  ASSERT_NE(memory.data, nullptr);
  ASSERT_EQ(memory.resident(), std::vector<bool>(pages, false));
  // From the middle of page 3 to the middle of page 990: pages 3-990 overlap it.
  const size_t begin = 3 * page + page / 2, end = 990 * page + 100;
  fault_in_pages(memory.data + begin, end - begin);
  const std::vector<bool> resident = memory.resident();
  for (size_t p = 0; p < pages; ++p) EXPECT_EQ(resident[p], p >= 3 && p <= 990) << "page " << p;
}

TEST(FaultInPages, WritesNothingOutsideTheRange) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  AnonymousPages memory(40);  // page-aligned, so the range below overlaps pages 0-37
  ASSERT_NE(memory.data, nullptr);
  uint8_t* buffer = memory.data;
  std::memset(buffer, 0xAB, memory.bytes);
  const size_t begin = page / 2 + 7, end = 37 * page + 11;
  fault_in_pages(buffer + begin, end - begin);
  for (size_t i = 0; i < memory.bytes; ++i) {
    if (i >= begin && i < end) continue;
    ASSERT_EQ(buffer[i], 0xAB) << "byte " << i;
  }
  size_t zeros = 0;
  for (size_t i = begin; i < end; ++i) zeros += buffer[i] == 0;
  EXPECT_EQ(zeros, 38u);  // one byte on each page the range overlaps (0-37)
}

TEST(FaultInPages, TakesAnEmptyRange) {
  uint8_t byte = 0xAB;
  fault_in_pages(&byte, 0);
  EXPECT_EQ(byte, 0xAB);
}

}  // namespace
}  // namespace mlaserve
