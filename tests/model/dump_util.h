// What the reference dump tools share: their token-id argument and a one-sequence fp32 cache.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "kernels/latent_cache_view.h"

namespace mlaserve {

inline std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) ids.push_back(int32_t(std::stol(item)));
  return ids;
}

// One sequence's cache of `capacity` positions, `layers` rows of `width` fp32 values each, in
// one block.
struct OneSequenceCache {
  OneSequenceCache(int64_t layers, int64_t width, int64_t capacity)
      : rows(size_t(capacity * layers * width)), view{rows.data(), CacheDType::F32, &block, 1,
                                                      capacity,    layers,          width} {}
  std::vector<float> rows;
  int32_t block = 0;
  LatentCacheView view;
};

}  // namespace mlaserve
