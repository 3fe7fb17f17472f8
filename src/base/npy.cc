#include "base/npy.h"

#include <fmt/format.h>

#include <fstream>

#include "base/error.h"

namespace mlaserve {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  int64_t count = 1;
  for (int64_t dim : shape) {
    dims += fmt::format("{}, ", dim);
    count *= dim;
  }
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" for 1-D, "(3, 4)" otherwise
  std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
  // Magic (6) + version (2) + length (2) + header, padded with spaces to 64 bytes, ending in \n.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  MLA_CHECK(out.good(), "cannot write '{}'", path);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t header_len = uint16_t(header.size());
  out.write(reinterpret_cast<const char*>(&header_len), 2);
  out.write(header.data(), std::streamsize(header.size()));
  out.write(reinterpret_cast<const char*>(data), std::streamsize(count * sizeof(float)));
  MLA_CHECK(out.good(), "error writing '{}'", path);
}

}  // namespace mlaserve
