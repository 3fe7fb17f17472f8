#include "engine/executor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "engine/mpi_ranks.h"
#include "engine/thread_ranks.h"
#include "kernels/dispatch.h"
#include "parallel/mpi_world.h"

namespace mlaserve {
namespace {

int env_int(const char* ompi_name, const char* mpich_name, int fallback) {
  const char* value = std::getenv(ompi_name);
  if (!value) value = std::getenv(mpich_name);
  return value ? std::atoi(value) : fallback;
}

// The model one rank runs: a shard of size 1 (copied, locked, on its NUMA node(s)) when either
// is asked for, else the model itself.
std::unique_ptr<ModelExecutor> single_rank_executor(const CausalLM& model, const ExecutorOptions& options) {
  const RankPlacement placement = place_this_process(options.numa);
  if (!options.copy_weights && !options.lock_weights)
    return std::make_unique<SingleRankExecutor>(model, placement.nodes);
  return std::make_unique<SingleRankExecutor>(model.shard(options.shard_spec(0, 1, placement.nodes), nullptr),
                                              placement.nodes);
}

}  // namespace

// Left uninitialised: every row is written before it is read, and untouched pages cost no memory.
void* SingleRankExecutor::allocate_cache(size_t bytes) {
  pool_.reset(new uint8_t[bytes]);
  place_cache_pool(pool_.get(), bytes, numa_nodes_);
  return pool_.get();
}

void copy_within(void* pool, int64_t from, int64_t to, int64_t bytes) {
  std::memmove(static_cast<uint8_t*>(pool) + to, static_cast<const uint8_t*>(pool) + from, size_t(bytes));
}

void SingleRankExecutor::copy_in_cache(int64_t from, int64_t to, int64_t bytes) {
  copy_within(pool_.get(), from, to, bytes);
}

RankPlacement place_this_process(NumaMode numa) {
  const NumaTopology topology = NumaTopology::read();
  const std::vector<int> allowed = this_thread_cpus();
  size_t machine_cpus = 0;
  for (const NumaNode& node : topology.nodes) machine_cpus += node.cpus.size();
  int rank = 0, ranks = 1;
  if (launched_by_mpi() && allowed.size() >= machine_cpus) {
    ranks = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", 1));
    rank = std::clamp(env_int("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", 0), 0, ranks - 1);
  }
  const RankPlacement placement = plan_rank_placement(topology, allowed, rank, ranks, numa);
  if (!placement.placed()) return placement;
  if (const std::string error = bind_this_thread(placement); !error.empty()) {
    spdlog::warn("could not bind this process to {} ({}); it runs unbound", placement.describe(), error);
    return {};
  }
  set_num_threads(default_num_threads());
  spdlog::info("this process: {}", placement.describe());
  return placement;
}

std::unique_ptr<ModelExecutor> create_executor(const CausalLM& model, const ExecutorOptions& options) {
  MLA_CHECK(options.ranks >= 1, "--tp must be at least 1");
  spdlog::info("kernels: {}", kernel_features(kernel_config()));
  if (launched_by_mpi()) return make_mpi_leader_executor(model, options);
  if (options.ranks == 1) return single_rank_executor(model, options);
  return std::make_unique<ThreadRanksExecutor>(model, options);
}

bool is_mpi_follower() { return launched_by_mpi() && make_mpi_communicator()->rank() != 0; }

}  // namespace mlaserve
