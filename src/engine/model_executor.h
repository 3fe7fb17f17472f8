// How the engine runs a batch: the model on one rank, or shards of it on several ranks
// (threads of this process, or MPI processes driven by rank 0). Every rank keeps its own
// full copy of the latent cache pool (the latent is shared by all heads, so a rank that holds
// some heads still needs all of it) at the same block offsets, so the engine's one block
// table serves every rank.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/causal_lm.h"

namespace mlaserve {

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int ranks() const { return 1; }
  // What runs the model, for the start-up log.
  virtual std::string describe() const = 0;
  // Gives every rank a cache pool of `bytes`; returns rank 0's: the pool the engine's views name.
  virtual void* allocate_cache(size_t bytes) = 0;
  // Runs the batch on every rank, each in its own pool; logits: [logit_rows(batch), vocab].
  virtual void forward(std::span<const ForwardSequence> batch, float* logits) = 0;
  // Copies bytes [from, from + bytes) of every rank's pool to [to, to + bytes) of the same pool
  // (recurrent-state snapshots).
  virtual void copy_in_cache(int64_t from, int64_t to, int64_t bytes) = 0;
};

// memmove inside one pool.
void copy_within(void* pool, int64_t from, int64_t to, int64_t bytes);

// The whole model on this thread's kernel pool; its cache pool on `numa_nodes` (place_memory).
class SingleRankExecutor : public ModelExecutor {
 public:
  explicit SingleRankExecutor(const CausalLM& model, std::vector<int> numa_nodes = {})
      : model_(model), numa_nodes_(std::move(numa_nodes)) {}
  explicit SingleRankExecutor(std::unique_ptr<CausalLM> owned, std::vector<int> numa_nodes = {})
      : owned_(std::move(owned)), model_(*owned_), numa_nodes_(std::move(numa_nodes)) {}
  const ModelConfig& config() const override { return model_.config(); }
  std::string describe() const override { return "1 rank"; }
  void* allocate_cache(size_t bytes) override;
  void forward(std::span<const ForwardSequence> batch, float* logits) override { model_.forward(batch, logits); }
  void copy_in_cache(int64_t from, int64_t to, int64_t bytes) override;

 private:
  std::unique_ptr<CausalLM> owned_;  // the model_ it runs, when it owns it
  const CausalLM& model_;
  std::vector<int> numa_nodes_;
  std::unique_ptr<uint8_t[]> pool_;
};

}  // namespace mlaserve
