#include "engine/metrics.h"

#include <algorithm>

namespace mlaserve {

void Histogram::observe(double value) {
  const size_t bucket = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  std::lock_guard lock(mutex_);
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mutex_);
  Snapshot out{bounds_, {}, sum_, count_};
  uint64_t running = 0;
  for (uint64_t count : counts_) out.cumulative.push_back(running += count);
  return out;
}

}  // namespace mlaserve
