#include "engine/model_drafter.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"
#include "kernels/sampling.h"

namespace mlaserve {

DraftModelDrafter::DraftModelDrafter(std::unique_ptr<CausalLM> draft, std::string model_dir)
    : draft_(std::move(draft)), model_dir_(std::move(model_dir)) {
  MLA_CHECK(draft_->config().recurrent_state_bytes() == 0,
            "draft model '{}': models with recurrent (KDA) layers cannot draft (their state cannot be rolled back)",
            model_dir_);
}

void DraftModelDrafter::prepare(const DraftBudget& budget) {
  MLA_CHECK(!cache_, "the draft model '{}' already drafts for another engine", model_dir_);
  const ModelConfig& config = draft_->config();
  MLA_CHECK(config.vocab_size == budget.vocab_size,
            "draft model '{}' has a vocabulary of {} tokens, the target {}: a draft model must share the target's "
            "tokenizer",
            model_dir_, config.vocab_size, budget.vocab_size);
  cache_.emplace(budget, config.cache_layers(), config.kv_latent_dim());
  spdlog::info("draft model '{}': {} layers, {:.1f} MB of weights, a latent cache of {} tokens ({:.1f} MB)", model_dir_,
               config.num_hidden_layers, double(draft_->weight_bytes()) / 1e6, cache_->tokens(),
               double(cache_->bytes()) / 1e6);
}

void DraftModelDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  MLA_CHECK(cache_.has_value(), "internal: the draft model '{}' was not prepared by an engine", model_dir_);
  const int64_t vocab = draft_->config().vocab_size;
  const auto idle = [&](int64_t id) {
    return std::none_of(requests.begin(), requests.end(), [&](const DraftRequest& r) { return r.sequence_id == id; });
  };
  proposals.assign(requests.size(), {});
  std::vector<size_t> drafting;  // requests[drafting[j]] is batch row j
  std::vector<int64_t> budget;   // tokens it may still propose
  batch_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    const int64_t length = int64_t(request.tokens.size());
    const int64_t k = std::min(request.max_tokens, draft_->config().max_position_embeddings - length);
    if (k <= 0 || length == 0) continue;
    const auto reservation = cache_->reserve(request.sequence_id, request.tokens, length + k - 1, idle);
    if (!reservation) continue;
    std::vector<int32_t>& cached = cached_[request.sequence_id];
    if (reservation->fresh) cached.assign(request.tokens.begin(), request.tokens.begin() + reservation->cached_tokens);
    // The rows already computed for these tokens; the last token is always run for its logits.
    const int64_t valid = std::min<int64_t>(
        length - 1, std::mismatch(cached.begin(), cached.end(), request.tokens.begin(), request.tokens.end()).first -
                        cached.begin());
    cached.assign(request.tokens.begin(), request.tokens.end());
    drafting.push_back(i);
    budget.push_back(k);
    proposals[i].reserve(size_t(k));
    batch_.push_back({request.tokens.subspan(size_t(valid)), valid, cache_->view(request.sequence_id), MlaPath::Auto,
                      ForwardSequence::Logits::Last});
  }
  for (int64_t step = 0; !batch_.empty(); ++step) {
    logits_.resize(batch_.size() * size_t(vocab));
    draft_->forward(batch_, logits_.data());
    if (step == 0)  // the committed tokens' full blocks are a prefix other sequences may reuse
      for (size_t i : drafting)
        cache_->publish(requests[i].sequence_id, requests[i].tokens, int64_t(requests[i].tokens.size()));
    std::vector<ForwardSequence> next;
    std::vector<size_t> still;
    std::vector<int64_t> still_budget;
    for (size_t j = 0; j < drafting.size(); ++j) {
      std::vector<int32_t>& proposal = proposals[drafting[j]];
      proposal.push_back(argmax(logits_.data() + j * size_t(vocab), vocab));
      if (int64_t(proposal.size()) == budget[j]) continue;
      const int64_t id = requests[drafting[j]].sequence_id;
      std::vector<int32_t>& cached = cached_[id];
      next.push_back({std::span(&proposal.back(), 1), int64_t(cached.size()), cache_->view(id), MlaPath::Absorbed,
                      ForwardSequence::Logits::Last});
      cached.push_back(proposal.back());  // this step writes its latent
      still.push_back(drafting[j]);
      still_budget.push_back(budget[j]);
    }
    batch_.swap(next);
    drafting.swap(still);
    budget.swap(still_budget);
  }
}

void DraftModelDrafter::release(int64_t sequence_id) {
  if (cache_) cache_->release(sequence_id);
  cached_.erase(sequence_id);
}

std::string DraftModelDrafter::describe() const {
  return fmt::format("draft model '{}' ({} layers, greedy)", model_dir_, draft_->config().num_hidden_layers);
}

}  // namespace mlaserve
