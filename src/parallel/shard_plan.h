// How a dimension is split over ranks: contiguous, as even as possible, with split points
// aligned (INT4 weights split only at group boundaries). Pure functions, unit-tested.
#pragma once
#include <cstdint>

#include "base/error.h"

namespace mlaserve {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Part `index` of [0, n) cut into `parts`, each split point rounded down to `align`.
inline Range even_split(int64_t n, int parts, int index, int64_t align = 1) {
  auto point = [&](int i) { return i == parts ? n : (n * i / parts) / align * align; };
  return {point(index), point(index + 1)};
}

// Attention heads of a rank: they must divide evenly (each rank runs the same kernel shape).
inline Range heads_of_rank(int64_t heads, int size, int rank) {
  MLA_CHECK(size > 0 && heads % size == 0, "num_attention_heads {} is not divisible by the tensor-parallel size {}",
            heads, size);
  return {heads / size * rank, heads / size * (rank + 1)};
}

}  // namespace mlaserve
