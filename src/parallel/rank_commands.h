// What rank 0 of an MPI job tells its followers when it alone drives the model (serve,
// bench-model): allocate a cache pool, run this batch, stop. Rank 0 broadcasts each command;
// a follower receives it, runs it on its shard and its own pool, and waits for the next.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/causal_lm.h"
#include "parallel/communicator.h"

namespace mlaserve {

enum class RankCommandKind : int64_t { AllocateCache = 1, Forward = 2, Stop = 3, CopyInCache = 4 };

// A command as a follower sees it. For Forward, `batch` views the message's own tokens and
// block tables (in `ids`) and points at `pool`, the follower's pool.
struct RankCommand {
  RankCommandKind kind = RankCommandKind::Stop;
  int64_t cache_bytes = 0;  // AllocateCache; CopyInCache: the bytes copied
  int64_t copy_from = 0, copy_to = 0;  // CopyInCache
  std::vector<ForwardSequence> batch;
  std::vector<int64_t> message;
  std::vector<int32_t> ids;  // block tables and tokens the batch's spans point into
};

void send_allocate_cache(Communicator& comm, int64_t bytes);
void send_forward(Communicator& comm, std::span<const ForwardSequence> batch);
void send_stop(Communicator& comm);
void send_copy_in_cache(Communicator& comm, int64_t from, int64_t to, int64_t bytes);
// Waits (sleeping, not spinning, between polls) for rank 0's next command.
RankCommand receive_rank_command(Communicator& comm, void* pool);

}  // namespace mlaserve
