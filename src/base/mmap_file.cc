#include "base/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/thread_pool.h"

namespace mlaserve {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MLA_CHECK(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path);
  }
  size_ = size_t(info.st_size);
  if (size_ > 0) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      ::close(fd);
      fail("cannot mmap '{}': {}", path, std::strerror(errno));
    }
    data_ = static_cast<const uint8_t*>(mapped);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::release(const void* begin, size_t bytes) const {
  const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = (uintptr_t(begin) + page - 1) / page * page, end = (uintptr_t(begin) + bytes) / page * page;
  if (!contains(begin) || end <= first) return;
  // Read-only private file pages: MADV_DONTNEED only unmaps them, the file keeps the bytes.
  ::madvise(reinterpret_cast<void*>(first), end - first, MADV_DONTNEED);
}

int lock_in_memory(const void* begin, size_t bytes) {
  if (bytes == 0) return 0;
  return ::mlock(begin, bytes) == 0 ? 0 : errno;
}

void fault_in_pages(void* begin, size_t bytes) {
  if (bytes == 0) return;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE)), start = uintptr_t(begin);
  const uintptr_t first_page = start / page, end_page = (start + bytes - 1) / page + 1;
  thread_pool().parallel_for(
      int64_t(end_page - first_page),
      [&](int64_t begin_index, int64_t end_index, int) {
        for (auto index = uintptr_t(begin_index); index < uintptr_t(end_index); ++index)  // the range's byte on it
          *reinterpret_cast<volatile uint8_t*>(std::max(start, (first_page + index) * page)) = 0;
      },
      256);
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MLA_CHECK(in.good(), "cannot open '{}'", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace mlaserve
