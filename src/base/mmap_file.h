// A read-only memory-mapped file (RAII). Checkpoint tensors are used in place from it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace mlaserve {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  bool contains(const void* address) const { return address >= data_ && address < data_ + size_; }
  // Drops the whole pages inside [begin, begin + bytes) from this process's resident set; they
  // are read back from the file if touched again. For a rank that copied what it needs.
  void release(const void* begin, size_t bytes) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::string read_text_file(const std::string& path);  // throws Error naming the path

// Locks the pages of [begin, begin + bytes) in RAM (mlock), faulting them in: they are not
// paged out or reclaimed until the process unmaps or frees them. Returns 0 or the errno
// (ENOMEM or EPERM past RLIMIT_MEMLOCK without CAP_IPC_LOCK).
int lock_in_memory(const void* begin, size_t bytes);

// Faults in the pages of fresh memory [begin, begin + bytes) by writing a zero byte into each,
// spread over the thread pool: later writes (a decode step storing its latents) take no page
// fault, and the memory is committed now rather than when first used. Any NUMA policy set on
// the range (place_memory) decides where the pages go.
void fault_in_pages(void* begin, size_t bytes);

}  // namespace mlaserve
