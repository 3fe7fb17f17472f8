#include "engine/mtp_drafter.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "base/error.h"
#include "kernels/sampling.h"

namespace mlaserve {

MtpDrafter::MtpDrafter(std::unique_ptr<DeepseekMtp> module, int64_t held_bytes)
    : module_(std::move(module)), held_bytes_(held_bytes) {}

void MtpDrafter::prepare(const DraftBudget& budget) {
  MLA_CHECK(!cache_, "the mtp drafter already drafts for another engine");
  MLA_CHECK(module_->config().vocab_size == budget.vocab_size,
            "internal: the MTP layer's vocabulary is not the target's");
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
  if (reservation && reservation->fresh) {
    seq.rows = seq.held_from = reservation->cached_tokens;
    seq.held.clear();
  }
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
  const int64_t width = module_->config().hidden_size;
  std::vector<int64_t> full;  // sequences holding more than held_bytes_
  std::vector<std::span<const int32_t>> full_tokens;
  for (const ObservedChunk& chunk : chunks) {
    MtpSequence& seq = sequences_[chunk.sequence_id];
    seq.ready_for = -1;
    if (chunk.start == 0) seq = MtpSequence{};  // computed from the first token: nothing is missing
    const int64_t end = chunk.start + chunk.count;
    if (seq.blind || !reserve(chunk, seq, chunks)) continue;
    // The chunk's rows from the first not yet known, and its last row always, whose output is
    // the first draft (rows the drafter's own prefix cache gave may run past it).
    const int64_t from = std::min(seq.rows, end - 1);
    if (from < seq.held_from) {
      seq.held.clear();
      seq.held_from = from;
    } else {
      seq.held.resize(size_t((from - seq.held_from) * width));
    }
    seq.held.insert(seq.held.end(), chunk.hidden + (from - chunk.start) * width, chunk.hidden + chunk.count * width);
    seq.rows = end;
    if (int64_t(seq.held.size()) * 4 > held_bytes_) {
      full.push_back(chunk.sequence_id);
      full_tokens.push_back(chunk.tokens);
    }
  }
  run_held(full, full_tokens, false);
}

void MtpDrafter::run_held(std::span<const int64_t> ids, std::span<const std::span<const int32_t>> tokens,
                          bool first_draft) {
  const int64_t width = module_->config().hidden_size, vocab = module_->config().vocab_size;
  batch_.clear();
  hidden_.clear();
  std::vector<size_t> ran;         // ids[ran[j]] is batch row j
  std::vector<int64_t> last_rows;  // the batch index of each one's last row
  for (size_t i = 0; i < ids.size(); ++i) {
    const MtpSequence& seq = sequences_.at(ids[i]);
    const int64_t count = seq.rows - seq.held_from - (first_draft ? 0 : 1);
    if (count <= 0) continue;
    hidden_.insert(hidden_.end(), seq.held.begin(), seq.held.begin() + count * width);
    batch_.push_back({tokens[i].subspan(size_t(seq.held_from + 1), size_t(count)), seq.held_from, cache_->view(ids[i]),
                      MlaPath::Auto, first_draft ? ForwardSequence::Logits::Last : ForwardSequence::Logits::None});
    last_rows.push_back(int64_t(hidden_.size()) / width - 1);
    ran.push_back(i);
  }
  if (batch_.empty()) return;
  run(batch_, hidden_);
  for (size_t j = 0; j < ran.size(); ++j) {
    MtpSequence& seq = sequences_.at(ids[ran[j]]);
    const int64_t count = int64_t(batch_[j].tokens.size());
    seq.held.erase(seq.held.begin(), seq.held.begin() + count * width);
    seq.held_from += count;
    cache_->publish(ids[ran[j]], tokens[ran[j]], seq.held_from);
    if (!first_draft) continue;
    seq.next = argmax(logits_.data() + j * size_t(vocab), vocab);
    seq.state.assign(states_.begin() + last_rows[j] * width, states_.begin() + (last_rows[j] + 1) * width);
    seq.ready_for = seq.held_from + 1;
  }
}

void MtpDrafter::propose(std::span<const DraftRequest> requests, std::vector<std::vector<int32_t>>& proposals) {
  const int64_t width = module_->config().hidden_size, vocab = module_->config().vocab_size;
  proposals.assign(requests.size(), {});
  std::vector<size_t> drafting;
  std::vector<int64_t> catch_up;  // sequences whose held rows run now, the last giving the first draft
  std::vector<std::span<const int32_t>> catch_up_tokens;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& request = requests[i];
    const auto found = sequences_.find(request.sequence_id);
    const int64_t length = int64_t(request.tokens.size());
    if (request.max_tokens <= 0 || found == sequences_.end() || found->second.blind ||
        !cache_->holds(request.sequence_id))
      continue;
    const MtpSequence& seq = found->second;
    if (seq.ready_for != length) {
      // The target's states must reach row L - 2, just before the last committed token.
      if (seq.rows != length - 1 || seq.held_from >= seq.rows) continue;
      catch_up.push_back(request.sequence_id);
      catch_up_tokens.push_back(request.tokens);
    }
    drafting.push_back(i);
  }
  run_held(catch_up, catch_up_tokens, true);
  std::vector<size_t> chaining;  // requests[chaining[j]] is batch row j
  batch_.clear();
  hidden_.clear();
  for (const size_t i : drafting) {
    const DraftRequest& request = requests[i];
    const MtpSequence& seq = sequences_.at(request.sequence_id);
    const int64_t length = int64_t(request.tokens.size());
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
      next.push_back({std::span(&proposal.back(), 1), batch_[j].start_position + 1, batch_[j].cache, MlaPath::Absorbed,
                      ForwardSequence::Logits::Last});
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
