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

int count_numa_nodes(const std::string& node_list) {
  int nodes = 0;
  std::istringstream ranges(node_list);
  for (std::string range; std::getline(ranges, range, ',');) {
    if (range.find_first_of("0123456789") == std::string::npos) continue;
    const size_t dash = range.find('-');
    nodes += dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
  }
  return nodes;
}

int numa_node_count() {
  std::ifstream in("/sys/devices/system/node/online");
  std::string list;
  if (!std::getline(in, list)) return 1;
  return std::max(1, count_numa_nodes(list));
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MLA_CHECK(in.good(), "cannot open '{}'", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace mlaserve
