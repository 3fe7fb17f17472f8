// The target's own multi-token-prediction layer as the drafter (`--speculative mtp`, as vLLM
// and SGLang run DeepSeek-V3's). Row j of the MTP layer takes the target's final normed state
// at position j and token j + 1, and predicts token j + 2. The target's states are held as they
// come, and a sequence's rows run through the layer — all drafting sequences in one batched
// pass — only when it drafts (or when its held rows pass held_bytes), so a sequence that never
// drafts costs a copy of its states. Row L - 2 gives the first draft token; a proposal then
// chains the module k - 1 more times on its own output state, as DeepSeek-V3's sequential MTP
// does. Its one-layer latent cache is a DraftCache; a sequence whose earlier rows it never saw
// (a target prefix-cache hit on blocks it did not keep) gets no drafts until the target
// recomputes it from the start.
#pragma once
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/draft_cache.h"
#include "model/deepseek_mtp.h"

namespace mlaserve {

class MtpDrafter : public Drafter {
 public:
  static constexpr int64_t kHeldBytes = int64_t(16) << 20;
  // held_bytes: how many bytes of a sequence's states wait unrun at most.
  explicit MtpDrafter(std::unique_ptr<DeepseekMtp> module, int64_t held_bytes = kHeldBytes);
  void prepare(const DraftBudget& budget) override;
  std::vector<int> hidden_state_layers() const override { return {HiddenStates::kFinalNorm}; }
  void observe(std::span<const ObservedChunk> chunks) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  void release(int64_t sequence_id) override;
  std::string describe() const override { return "the model's multi-token-prediction layer (greedy, chained)"; }

 private:
  struct MtpSequence {
    int64_t rows = 0;       // the target's states of rows [0, rows) are known...
    int64_t held_from = 0;  // ...[0, held_from) in the cache, [held_from, rows) in `held`
    std::vector<float> held;
    bool blind = false;        // some row before `rows` is missing: no drafts
    int64_t ready_for = -1;    // the sequence length `next` and `state` continue (-1: none)
    int32_t next = 0;          // the first draft token
    std::vector<float> state;  // the module's output state at row ready_for - 2, chained on
  };
  // Room for the chunk's rows and k chained positions; false makes the sequence blind.
  bool reserve(const ObservedChunk& chunk, MtpSequence& seq, std::span<const ObservedChunk> chunks);
  // Runs the held rows of these sequences through the module in one batch; with `first_draft`
  // all of them (the last gives the first draft token), else all but the last, which is kept.
  void run_held(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens, bool first_draft);
  void run(std::span<const ForwardSequence> batch, const std::vector<float>& hidden);

  std::unique_ptr<DeepseekMtp> module_;
  int64_t held_bytes_;
  std::optional<DraftCache> cache_;
  int64_t max_draft_tokens_ = 0;
  std::unordered_map<int64_t, MtpSequence> sequences_;
  std::vector<ForwardSequence> batch_;  // reused from step to step
  std::vector<float> hidden_, states_, logits_;
};

}  // namespace mlaserve
