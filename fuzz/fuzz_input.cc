#include "fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace mlaserve::fuzz {

std::string write_input_file(const uint8_t* data, size_t size, const std::string& extension) {
  static std::string path;  // one file a process, whatever the extension: a target writes one kind
  if (path.empty()) std::atexit([] { std::remove(path.c_str()); });
  path = "/tmp/mlaserve-fuzz-" + std::to_string(getpid()) + "." + extension;
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

std::string models_dir() { return MLASERVE_MODELS_DIR; }

}  // namespace mlaserve::fuzz
