// How a command runs its one sequence through the model: on a single rank, on --tp thread
// ranks, or as this process's rank when launched by mpirun (only rank 0 writes output).
#pragma once
#include <memory>
#include <span>

#include "cli/commands.h"
#include "model/deepseek_v3.h"

namespace mlaserve {

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // A runner for one sequence of up to `capacity` positions.
  static std::unique_ptr<SequenceRunner> create(const DeepseekV3Model& model, const ParallelFlags& flags,
                                                int64_t capacity);
  virtual void forward(std::span<const int32_t> tokens, int64_t start, bool all_logits, float* logits,
                       MlaPath path = MlaPath::Auto) = 0;
  virtual bool writes_output() const { return true; }
  virtual double collective_seconds() const { return 0; }
  virtual int ranks() const { return 1; }
};

}  // namespace mlaserve
