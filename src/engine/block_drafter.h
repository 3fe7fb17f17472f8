// Block drafters (`--speculative dflash:DIR`, as z-lab's DFlash; `dspark:DIR`, DFlash with a
// Markov head, as the seed deployment drafted for Kimi K3): a BlockDraftModel proposes up to
// block_size - 1 tokens for every drafting sequence in one batched forward. It reads the
// target's hidden states at the draft's target_layer_ids: after every target forward the rows
// of the positions the target kept go through fc into each draft layer's keys and values, in a
// paged DraftCache with a prefix cache of its own. A sequence whose earlier rows it never saw
// (a target prefix-cache hit on blocks it did not keep) gets no drafts until the target
// recomputes it from the start.
#pragma once
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/draft_cache.h"
#include "model/dflash.h"

namespace mlaserve {

class BlockDrafter : public Drafter {
 public:
  // markov_head: DSpark's; the checkpoint must have one. DFlash uses one where it has one.
  BlockDrafter(std::unique_ptr<BlockDraftModel> model, std::string model_dir, bool markov_head);
  void prepare(const DraftBudget& budget) override;
  std::vector<int> hidden_state_layers() const override { return model_->config().target_layer_ids; }
  void observe(std::span<const ObservedChunk> chunks) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  void release(int64_t sequence_id) override;
  std::string describe() const override;

 private:
  struct Context {
    int64_t rows = 0;     // the cache holds context rows [0, rows)
    bool blind = false;   // some row before `rows` is missing: no drafts
  };
  // Blocks for the chunk's rows; false makes the sequence blind.
  bool reserve(const ObservedChunk& chunk, Context& context, std::span<const ObservedChunk> chunks);
  // Drafts greedily from the blocks' logits rows (chained through the Markov head, if any).
  void draft_tokens(std::span<const size_t> drafting, std::span<const DraftRequest> requests,
                    std::vector<std::vector<int32_t>>& proposals);

  std::unique_ptr<BlockDraftModel> model_;
  std::string model_dir_;
  std::optional<DraftCache> cache_;
  std::unordered_map<int64_t, Context> sequences_;
  std::vector<ContextRows> rows_;  // reused from step to step
  std::vector<DraftBlock> blocks_;
  std::vector<int32_t> first_tokens_;
  std::vector<float> features_, states_, picked_, logits_;
};

}  // namespace mlaserve
