// A draft model: any smaller model mlaserve loads with the target's vocabulary, run greedily
// on this thread with a paged latent cache of its own. Each proposal first catches the draft's
// cache up with the sequence (the tokens it holds that the target rejected are recomputed; a
// prompt prefix another sequence already computed is reused through the prefix cache), then
// decodes up to k tokens, all running sequences in one batched forward a position.
#pragma once
#include <memory>
#include <optional>
#include <unordered_map>

#include "engine/draft_cache.h"
#include "engine/drafter.h"
#include "model/causal_lm.h"

namespace mlaserve {

class DraftModelDrafter : public Drafter {
 public:
  DraftModelDrafter(std::unique_ptr<CausalLM> draft, std::string model_dir);
  // Sizes the draft's cache as the target's and checks that the vocabularies agree.
  void prepare(const DraftBudget& budget) override;
  void propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) override;
  void release(int64_t sequence_id) override;
  std::string describe() const override;

 private:
  std::unique_ptr<CausalLM> draft_;
  std::string model_dir_;
  std::optional<DraftCache> cache_;
  std::unordered_map<int64_t, std::vector<int32_t>> cached_;  // the tokens whose rows a sequence's cache holds
  std::vector<ForwardSequence> batch_;                        // reused from step to step
  std::vector<float> logits_;
};

}  // namespace mlaserve
