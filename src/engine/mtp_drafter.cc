#include "engine/mtp_drafter.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"
#include "kernels/sampling.h"

namespace mlaserve {

MtpDrafter::MtpDrafter(std::unique_ptr<DeepseekMtp> module) : module_(std::move(module)) {}

void MtpDrafter::prepare(const DraftBudget& budget) {
  MLA_CHECK(!cache_, "the mtp drafter already drafts for another engine");
  MLA_CHECK(module_->config().vocab_size == budget.vocab_size, "internal: the MTP layer's vocabulary is not the target's");
  cache_.emplace(budget, 1, module_->config().kv_latent_dim());
  max_draft_tokens_ = budget.max_draft_tokens;
  spdlog::info("mtp drafter: a one-layer latent cache of {} tokens ({:.1f} MB)", cache_->tokens(),
               double(cache_->bytes()) / 1e6);
}

bool MtpDrafter::reserve(const ObservedChunk& chunk, MtpSequence& seq, std::span<const ObservedChunk> chunks) {
  const auto idle = [&](int64_t id) {
    return std::none_of(chunks.begin(), chunks.end(), [&](const ObservedChunk& c) { return c.sequence_id == id; });
  };
  const int64_t end = chunk.start + chunk.count;
  const auto reservation = cache_->reserve(chunk.sequence_id, chunk.tokens, end + max_draft_tokens_, idle);
  if (reservation && reservation->fresh) seq.rows = reservation->cached_tokens;
  if (reservation && seq.rows >= chunk.start) return true;
  seq.blind = true;
  cache_->release(chunk.sequence_id);
  return false;
}

void MtpDrafter::run(std::span<const ForwardSequence> batch, const std::vector<float>& hidden) {
  states_.resize(hidden.size());
  logits_.resize(size_t(logit_rows(batch) * module_->config().vocab_size));
  module_->forward(batch, hidden.data(), states_.data(), logits_.data());
}

void MtpDrafter::observe(std::span<const ObservedChunk> chunks) {
  const int64_t width = module_->config().hidden_size, vocab = module_->config().vocab_size;
  batch_.clear();
  hidden_.clear();
  std::vector<std::pair<MtpSequence*, int64_t>> ready;  // sequences with a first draft, and their length
  std::vector<int64_t> last_rows;                       // batch index of each one's last row
  int64_t n_rows = 0;
  for (const ObservedChunk& chunk : chunks) {
    MtpSequence& seq = sequences_[chunk.sequence_id];
    seq.ready_for = -1;
    if (chunk.start == 0) seq = MtpSequence{};  // computed from the first token: nothing is missing
    const int64_t end = chunk.start + chunk.count, length = int64_t(chunk.tokens.size());
    const bool decoding = end + 1 == length;  // the last committed token's draft follows row end - 1
    // (Rows from the drafter's own prefix cache may run past this chunk.)
    if (seq.blind || !reserve(chunk, seq, chunks) || (!decoding && seq.rows >= end)) continue;
    const int64_t from = decoding ? std::min(seq.rows, end - 1) : seq.rows;
    hidden_.insert(hidden_.end(), chunk.hidden + (from - chunk.start) * width, chunk.hidden + chunk.count * width);
    batch_.push_back({chunk.tokens.subspan(size_t(from + 1), size_t(end - from)), from, cache_->view(chunk.sequence_id),
                      MlaPath::Auto, decoding ? ForwardSequence::Logits::Last : ForwardSequence::Logits::None});
    n_rows += end - from;
    seq.rows = std::max(seq.rows, end);
    if (decoding) {
      ready.emplace_back(&seq, length);
      last_rows.push_back(n_rows - 1);
    }
  }
  if (batch_.empty()) return;
  run(batch_, hidden_);
  for (const ObservedChunk& chunk : chunks)
    if (cache_->holds(chunk.sequence_id)) cache_->publish(chunk.sequence_id, chunk.tokens, sequences_[chunk.sequence_id].rows);
  for (size_t r = 0; r < ready.size(); ++r) {
    MtpSequence& seq = *ready[r].first;
    seq.next = argmax(logits_.data() + r * size_t(vocab), vocab);
    seq.state.assign(states_.begin() + last_rows[r] * width, states_.begin() + (last_rows[r] + 1) * width);
    seq.ready_for = ready[r].second;
  }
}

void MtpDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  const int64_t width = module_->config().hidden_size, vocab = module_->config().vocab_size;
  proposals.assign(requests.size(), {});
  std::vector<size_t> chaining;  // requests[chaining[j]] is batch row j
  batch_.clear();
  hidden_.clear();
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    const auto found = sequences_.find(request.sequence_id);
    const int64_t length = int64_t(request.tokens.size());
    if (found == sequences_.end() || found->second.ready_for != length || request.max_tokens <= 0 ||
        !cache_->holds(request.sequence_id))
      continue;
    const MtpSequence& seq = found->second;
    proposals[i].reserve(size_t(request.max_tokens));
    proposals[i].push_back(seq.next);
    if (request.max_tokens == 1) continue;
    // Row L - 1 (the last committed token's position): the module's own state stands in for
    // the target's, which the next forward computes.
    hidden_.insert(hidden_.end(), seq.state.begin(), seq.state.end());
    batch_.push_back({std::span(&proposals[i].back(), 1), length - 1, cache_->view(request.sequence_id),
                      MlaPath::Absorbed, ForwardSequence::Logits::Last});
    chaining.push_back(i);
  }
  while (!batch_.empty()) {
    run(batch_, hidden_);
    std::vector<ForwardSequence> next;
    std::vector<size_t> still;
    hidden_.clear();
    for (size_t j = 0; j < chaining.size(); ++j) {
      std::vector<int32_t>& proposal = proposals[chaining[j]];
      proposal.push_back(argmax(logits_.data() + j * size_t(vocab), vocab));
      if (int64_t(proposal.size()) == requests[chaining[j]].max_tokens) continue;
      hidden_.insert(hidden_.end(), states_.begin() + int64_t(j) * width, states_.begin() + int64_t(j + 1) * width);
      next.push_back({std::span(&proposal.back(), 1), batch_[j].start_position + 1, batch_[j].cache,
                      MlaPath::Absorbed, ForwardSequence::Logits::Last});
      still.push_back(chaining[j]);
    }
    batch_.swap(next);
    chaining.swap(still);
  }
}

void MtpDrafter::release(int64_t sequence_id) {
  if (cache_) cache_->release(sequence_id);
  sequences_.erase(sequence_id);
}

}  // namespace mlaserve
