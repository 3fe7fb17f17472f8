#include "engine/state_snapshots.h"

#include <algorithm>

namespace mlaserve {

std::optional<int64_t> StateSnapshots::find(uint64_t hash, int64_t tokens) {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].used && slots_[i].hash == hash && slots_[i].tokens == tokens) {
      slots_[i].last_used = ++clock_;
      return int64_t(i);
    }
  return std::nullopt;
}

std::optional<int64_t> StateSnapshots::slot_to_write(uint64_t hash, int64_t tokens) {
  if (slots_.empty() || find(hash, tokens)) return std::nullopt;
  auto victim = std::min_element(slots_.begin(), slots_.end(), [](const Slot& a, const Slot& b) {
    return a.used != b.used ? !a.used : a.last_used < b.last_used;  // empty first, then oldest
  });
  *victim = {true, hash, tokens, ++clock_};
  return int64_t(victim - slots_.begin());
}

}  // namespace mlaserve
