// The target's own multi-token-prediction layer as the drafter (`--speculative mtp`, as vLLM
// and SGLang run DeepSeek-V3's). After every target forward it computes the MTP rows of the
// positions the target just computed (row j: the target's final normed state at j and token
// j + 1), all sequences in one batched pass, and keeps each decoding sequence's first draft
// token (row L - 2 predicts token L). A proposal then chains the module k - 1 more times on its
// own output state, as DeepSeek-V3's sequential MTP does. Its one-layer latent cache is a
// DraftCache; a sequence whose earlier rows it never saw (a target prefix-cache hit on blocks
// it did not keep) gets no drafts until the target recomputes it from the start.
#pragma once
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/draft_cache.h"
#include "model/deepseek_mtp.h"

namespace mlaserve {

class MtpDrafter : public Drafter {
 public:
  explicit MtpDrafter(std::unique_ptr<DeepseekMtp> module);
  void prepare(const DraftBudget& budget) override;
  std::vector<int> hidden_state_layers() const override { return {HiddenStates::kFinalNorm}; }
  void observe(std::span<const ObservedChunk> chunks) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  void release(int64_t sequence_id) override;
  std::string describe() const override { return "the model's multi-token-prediction layer (greedy, chained)"; }

 private:
  struct MtpSequence {
    int64_t rows = 0;        // rows [0, rows) hold the target's states
    bool blind = false;      // some row before `rows` is missing: no drafts
    int64_t ready_for = -1;  // the sequence length `next` and `state` continue (-1: none)
    int32_t next = 0;        // the first draft token
    std::vector<float> state;  // the module's output state at row ready_for - 2, chained on
  };
  // Room for the chunk's rows and k chained positions; false makes the sequence blind.
  bool reserve(const ObservedChunk& chunk, MtpSequence& seq, std::span<const ObservedChunk> chunks);
  void run(std::span<const ForwardSequence> batch, const std::vector<float>& hidden);

  std::unique_ptr<DeepseekMtp> module_;
  std::optional<DraftCache> cache_;
  int64_t max_draft_tokens_ = 0;
  std::unordered_map<int64_t, MtpSequence> sequences_;
  std::vector<ForwardSequence> batch_;  // reused from step to step
  std::vector<float> hidden_, states_, logits_;
};

}  // namespace mlaserve
