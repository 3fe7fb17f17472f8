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
  MLA_CHECK(!blocks_, "the draft model '{}' already drafts for another engine", model_dir_);
  const ModelConfig& config = draft_->config();
  MLA_CHECK(config.vocab_size == budget.vocab_size,
            "draft model '{}' has a vocabulary of {} tokens, the target {}: a draft model must share the target's "
            "tokenizer", model_dir_, config.vocab_size, budget.vocab_size);
  budget_ = budget;
  // The target's cache, plus room for k drafted positions and a partial block a sequence.
  const int64_t tokens = budget.cache_tokens + budget.max_sequences * (budget.max_draft_tokens + budget.block_size);
  const int64_t n_blocks = (tokens + budget.block_size - 1) / budget.block_size;
  const size_t bytes = size_t(n_blocks * budget.block_size *
                              config.kv_bytes_per_token(int64_t(cache_dtype_size(budget.cache_dtype))));
  pool_ = std::make_unique<uint8_t[]>(bytes);
  blocks_.emplace(n_blocks, budget.block_size);
  spdlog::info("draft model '{}': {} layers, {:.1f} MB of weights, a latent cache of {} tokens ({:.1f} MB)",
               model_dir_, config.num_hidden_layers, double(draft_->weight_bytes()) / 1e6,
               n_blocks * budget.block_size, double(bytes) / 1e6);
}

LatentCacheView DraftModelDrafter::view(const DraftSequence& seq) const {
  const ModelConfig& config = draft_->config();
  return LatentCacheView{pool_.get(), budget_.cache_dtype, seq.block_table.data(), int64_t(seq.block_table.size()),
                         budget_.block_size, config.cache_layers(), config.kv_latent_dim()};
}

bool DraftModelDrafter::reserve(DraftSequence& seq, std::span<const int32_t> tokens, int64_t positions,
                                std::span<const DraftRequest> drafting) {
  for (;;) {
    if (seq.block_table.empty()) {
      if (auto allocation = blocks_->allocate(tokens, positions)) {
        seq.block_table = std::move(allocation->blocks);
        seq.cached.assign(tokens.begin(), tokens.begin() + allocation->cached_tokens);
        return true;
      }
    } else if (blocks_->grow(seq.block_table, positions)) {
      return true;
    }
    // Out of blocks: drop the cache of a sequence that is not drafting this step (preempted or
    // waiting), which recomputes it when it drafts again.
    const auto idle = std::find_if(sequences_.begin(), sequences_.end(), [&](const auto& entry) {
      return std::none_of(drafting.begin(), drafting.end(),
                          [&](const DraftRequest& r) { return r.sequence_id == entry.first; });
    });
    if (idle == sequences_.end()) return false;
    blocks_->release(idle->second.block_table);
    sequences_.erase(idle);
  }
}

void DraftModelDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  MLA_CHECK(blocks_.has_value(), "internal: the draft model '{}' was not prepared by an engine", model_dir_);
  const int64_t vocab = draft_->config().vocab_size;
  proposals.assign(requests.size(), {});
  std::vector<size_t> drafting;       // requests[drafting[j]] is batch row j
  std::vector<int64_t> budget;        // tokens it may still propose
  batch_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    const int64_t length = int64_t(request.tokens.size());
    const int64_t k = std::min(request.max_tokens, draft_->config().max_position_embeddings - length);
    if (k <= 0 || length == 0) continue;
    DraftSequence& seq = sequences_[request.sequence_id];
    if (!reserve(seq, request.tokens, length + k - 1, requests)) continue;
    // The rows already computed for these tokens; the last token is always run for its logits.
    const int64_t valid = std::min<int64_t>(
        length - 1, std::mismatch(seq.cached.begin(), seq.cached.end(), request.tokens.begin(), request.tokens.end())
                            .first - seq.cached.begin());
    seq.cached.assign(request.tokens.begin(), request.tokens.end());
    drafting.push_back(i);
    budget.push_back(k);
    proposals[i].reserve(size_t(k));
    batch_.push_back({request.tokens.subspan(size_t(valid)), valid, view(seq), MlaPath::Auto,
                      ForwardSequence::Logits::Last});
  }
  for (int64_t step = 0; !batch_.empty(); ++step) {
    logits_.resize(batch_.size() * size_t(vocab));
    draft_->forward(batch_, logits_.data());
    if (step == 0)  // the committed tokens' full blocks are a prefix other sequences may reuse
      for (size_t i : drafting) {
        const DraftSequence& seq = sequences_[requests[i].sequence_id];
        blocks_->publish(seq.block_table, requests[i].tokens, int64_t(requests[i].tokens.size()));
      }
    std::vector<ForwardSequence> next;
    std::vector<size_t> still;
    std::vector<int64_t> still_budget;
    for (size_t j = 0; j < drafting.size(); ++j) {
      std::vector<int32_t>& proposal = proposals[drafting[j]];
      proposal.push_back(argmax(logits_.data() + j * size_t(vocab), vocab));
      if (int64_t(proposal.size()) == budget[j]) continue;
      DraftSequence& seq = sequences_[requests[drafting[j]].sequence_id];
      const int64_t position = int64_t(seq.cached.size());
      seq.cached.push_back(proposal.back());  // this step writes its latent
      next.push_back({std::span(&proposal.back(), 1), position, view(seq), MlaPath::Absorbed,
                      ForwardSequence::Logits::Last});
      still.push_back(drafting[j]);
      still_budget.push_back(budget[j]);
    }
    batch_.swap(next);
    drafting.swap(still);
    budget.swap(still_budget);
  }
}

void DraftModelDrafter::release(int64_t sequence_id) {
  const auto found = sequences_.find(sequence_id);
  if (found == sequences_.end()) return;
  blocks_->release(found->second.block_table);
  sequences_.erase(found);
}

std::string DraftModelDrafter::describe() const {
  return fmt::format("draft model '{}' ({} layers, greedy)", model_dir_, draft_->config().num_hidden_layers);
}

}  // namespace mlaserve
