// How a command runs the model: on a single rank, on --tp thread ranks, or as this process's
// rank when launched by mpirun. logits and generate run one sequence on every rank alike
// (SequenceRunner; only rank 0 writes output); serve and bench-model drive an engine batch by
// batch from rank 0 (ModelExecutor), and the other MPI ranks follow rank 0's commands.
#pragma once
#include <memory>
#include <span>

#include "cli/commands.h"
#include "engine/model_executor.h"
#include "model/causal_lm.h"

namespace mlaserve {

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // A runner for one sequence of up to `capacity` positions.
  static std::unique_ptr<SequenceRunner> create(const CausalLM& model, const ParallelFlags& flags,
                                                int64_t capacity);
  virtual void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits,
                       MlaPath path = MlaPath::Auto) = 0;
  virtual bool writes_output() const { return true; }
  virtual double collective_seconds() const { return 0; }
  virtual int ranks() const { return 1; }
};

// Rank 0's executor: the model on one rank, on --tp thread ranks, or (under mpirun) on
// rank 0 of the MPI job, telling the others what to run.
std::unique_ptr<ModelExecutor> create_model_executor(const CausalLM& model, const ParallelFlags& flags);

// Under mpirun, true on every rank but 0: such a rank calls follow_rank_zero instead of
// doing the command's own work.
bool is_mpi_follower();
// Runs rank 0's commands on this rank's shard until rank 0 says stop.
void follow_rank_zero(const CausalLM& model, const ParallelFlags& flags);

}  // namespace mlaserve
