// Block drafters (`--speculative dflash:DIR`, as z-lab's DFlash; `dspark:DIR`, DFlash with a
// Markov head, as the seed deployment drafted for Kimi K3): a BlockDraftModel proposes up to
// block_size - 1 tokens for every drafting sequence in one batched forward. It reads the
// target's hidden states at the draft's target_layer_ids: the rows of the positions the target
// kept are held as they come and go through fc into each draft layer's keys and values, in a
// paged DraftCache with a prefix cache of its own, when the sequence drafts (or when its held
// rows pass held_bytes), so a sequence that never drafts costs a copy of its rows only. A
// sequence whose earlier rows it never saw
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
  static constexpr int64_t kHeldBytes = int64_t(16) << 20;
  // markov_head: DSpark's; the checkpoint must have one. DFlash uses one where it has one.
  // held_bytes: how many bytes of a sequence's rows wait unprojected at most.
  BlockDrafter(std::unique_ptr<BlockDraftModel> model, std::string model_dir, bool markov_head,
               int64_t held_bytes = kHeldBytes);
  void prepare(const DraftBudget& budget) override;
  std::vector<int> hidden_state_layers() const override { return model_->config().target_layer_ids; }
  void observe(std::span<const ObservedChunk> chunks) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  void release(int64_t sequence_id) override;
  std::string describe() const override;

 private:
  struct Context {
    int64_t rows = 0;         // context rows [0, rows) are known...
    int64_t projected = 0;    // ...[0, projected) in the cache, the rest in `held`
    std::vector<float> held;  // [rows - projected, feature_width]
    bool blind = false;       // some row before `rows` is missing: no drafts
  };
  // Blocks for the chunk's rows; false makes the sequence blind.
  bool reserve(const ObservedChunk& chunk, Context& context, std::span<const ObservedChunk> chunks);
  // Projects the held rows of these sequences into their caches, all in one batch.
  void project(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens);
  // Drafts greedily from the blocks' logits rows (chained through the Markov head, if any).
  void draft_tokens(std::span<const size_t> drafting, std::span<const DraftRequest> requests,
                    std::vector<std::vector<int32_t>>& proposals);

  std::unique_ptr<BlockDraftModel> model_;
  std::string model_dir_;
  int64_t held_bytes_;
  std::optional<DraftCache> cache_;
  std::unordered_map<int64_t, Context> sequences_;
  std::vector<ContextRows> rows_;  // reused from step to step
  std::vector<DraftBlock> blocks_;
  std::vector<int32_t> first_tokens_;
  std::vector<float> features_, states_, picked_, logits_;
};

}  // namespace mlaserve
