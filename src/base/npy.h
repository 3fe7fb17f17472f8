// Writes float32 arrays as NumPy .npy (format 1.0), so Python references can read them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mlaserve {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace mlaserve
