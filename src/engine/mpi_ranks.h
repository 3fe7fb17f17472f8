// The model run as the ranks of an MPI job (mpirun -np N): rank 0 drives it and tells its
// followers what to run — allocate a cache pool, run this batch, copy inside the pool, stop.
// Rank 0 broadcasts each command; a follower (follow_rank_zero, executor.h) receives it, runs
// it on its shard and its own pool, and waits for the next.
#pragma once
#include <memory>

#include "engine/executor.h"

namespace mlaserve {

// Rank 0's executor; every command it runs is first broadcast to the followers. Throws Error
// when --tp is neither 1 nor the world size.
std::unique_ptr<ModelExecutor> make_mpi_leader_executor(const CausalLM& model, const ExecutorOptions& options);

}  // namespace mlaserve
