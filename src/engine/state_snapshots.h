// Which recurrent-state snapshots the engine keeps for prefix caching of KDA models: the
// state after a prompt prefix that ends on a block boundary, named by the prefix's chained
// block hash (content-addressed, so it stays valid whatever happens to the blocks). A fixed
// number of slots, least recently used replaced first. Bookkeeping only: the engine copies
// the bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace mlaserve {

class StateSnapshots {
 public:
  explicit StateSnapshots(int64_t capacity) : slots_(static_cast<size_t>(capacity)) {}
  int64_t capacity() const { return int64_t(slots_.size()); }
  // The slot holding the state after `tokens` tokens whose prefix hash is `hash`.
  std::optional<int64_t> find(uint64_t hash, int64_t tokens);
  // The slot to write that state into (its own if kept, else an empty or the least recently
  // used one), now recorded as holding it; nullopt when it is already kept.
  std::optional<int64_t> slot_to_write(uint64_t hash, int64_t tokens);

 private:
  struct Slot {
    bool used = false;
    uint64_t hash = 0;
    int64_t tokens = 0;
    uint64_t last_used = 0;
  };
  std::vector<Slot> slots_;
  uint64_t clock_ = 0;
};

}  // namespace mlaserve
