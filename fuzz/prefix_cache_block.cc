// A prefix-cache block file's bytes (engine/disk_prefix_cache.h): read() accepts it only when
// its header, tokens and checksum are those of the block asked for; anything else is removed,
// so a read either fills the payload with what the file holds or leaves the file gone.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "engine/disk_prefix_cache.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kBlockSize = 4, kBlockBytes = 64;
  constexpr uint64_t kHash = 0x0123456789abcdefull;
  static const std::string dir = [] {
    spdlog::set_level(spdlog::level::off);  // every refused file warns
    const std::string path = "/tmp/mlaserve-fuzz-prefix-" + std::to_string(getpid());
    std::atexit([] { std::filesystem::remove_all("/tmp/mlaserve-fuzz-prefix-" + std::to_string(getpid())); });
    return path;
  }();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/00000000000000aa-0123456789abcdef.block", std::ios::binary)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  try {
    mlaserve::DiskPrefixCache cache({dir, 1 << 20, 0xaa}, kBlockSize, kBlockBytes);
    const int32_t tokens[kBlockSize] = {1, 2, 3, 4};
    std::vector<uint8_t> payload(kBlockBytes);
    const bool read = cache.read(kHash, tokens, payload.data());
    if (!read && cache.contains(kHash)) __builtin_trap();  // a refused file is forgotten
    // What was read back is the file's last kBlockBytes bytes.
    if (read && (size < kBlockBytes || std::memcmp(payload.data(), data + size - kBlockBytes, kBlockBytes) != 0))
      __builtin_trap();
  } catch (const mlaserve::Error&) {
  }
  return 0;
}
