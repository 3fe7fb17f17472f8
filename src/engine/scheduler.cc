#include "engine/scheduler.h"

#include <algorithm>

namespace mlaserve {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  if (config_.recurrent_state)
    for (int64_t slot = config_.max_num_seqs - 1; slot >= 0; --slot) free_state_slots_.push_back(int32_t(slot));
}

bool Scheduler::admit(Sequence* seq) {
  // Room for every known token plus the first token it will generate.
  const int64_t known = int64_t(seq->tokens.size());
  if (config_.before_admit) config_.before_admit(seq->tokens);
  std::span<const int32_t> reusable = seq->tokens;
  if (config_.recurrent_state) {  // only as far as a state snapshot reaches
    const int64_t cached = blocks_.cached_prefix_blocks(seq->tokens);
    const int64_t restorable =
        cached > 0 && config_.restorable_blocks ? config_.restorable_blocks(seq->tokens, cached) : 0;
    reusable = reusable.first(restorable > 0 ? size_t(restorable * blocks_.block_size() + 1) : 0);
  }
  auto allocation = blocks_.allocate(reusable, known + 1);
  if (!allocation) return false;
  if (config_.recurrent_state) {
    seq->state_slot = free_state_slots_.back();
    free_state_slots_.pop_back();
    seq->restore_tokens = allocation->cached_tokens;
  }
  seq->block_table = std::move(allocation->blocks);
  seq->n_computed = allocation->cached_tokens;
  seq->prefill_target = known;
  seq->running = true;
  running_.push_back(seq);
  return true;
}

void Scheduler::stop_running(Sequence* seq) {
  running_.erase(std::find(running_.begin(), running_.end(), seq));
  seq->running = false;
  if (seq->state_slot >= 0) free_state_slots_.push_back(seq->state_slot);
  seq->state_slot = -1;
  seq->restore_tokens = 0;
}

void Scheduler::preempt(Sequence* seq) {
  blocks_.release(seq->block_table);
  seq->draft.clear();
  seq->n_computed = 0;
  ++seq->preemptions;
  ++preemptions_;
  stop_running(seq);
  // Back to the queue in arrival order, ahead of anything younger.
  auto position =
      std::find_if(waiting_.begin(), waiting_.end(), [&](const Sequence* other) { return other->id > seq->id; });
  waiting_.insert(position, seq);
}

bool Scheduler::ensure_decode_slot(Sequence* seq) {
  const int64_t needed = int64_t(seq->tokens.size() + seq->draft.size());  // positions after this step
  while (!blocks_.grow(seq->block_table, needed)) {
    Sequence* youngest = *std::max_element(running_.begin(), running_.end(),
                                           [](const Sequence* a, const Sequence* b) { return a->id < b->id; });
    preempt(youngest);
    if (youngest == seq) return false;
  }
  return true;
}

int64_t Scheduler::prefill_count(const Sequence* seq, int64_t budget) const {
  const int64_t known = int64_t(seq->tokens.size()), block = blocks_.block_size();
  int64_t end = std::min(known, seq->n_computed + budget);
  // Recurrent state: a chunk ends on a block boundary, where the engine can keep a snapshot
  // (unless the budget is smaller than a block), when it does not finish the prompt and at the
  // prompt's last whole block, so that a request extending this prompt (a conversation's next
  // turn) resumes there; the prompt's last few tokens follow in the next step.
  if (config_.recurrent_state && config_.chunked_prefill_size >= block) {
    const int64_t boundary = end / block * block;
    if (end < known || boundary > seq->n_computed) end = boundary;
  }
  return std::max<int64_t>(0, end - seq->n_computed);
}

std::vector<ScheduledChunk> Scheduler::schedule() {
  std::vector<ScheduledChunk> plan;
  const bool decoding = std::any_of(running_.begin(), running_.end(),
                                    [](const Sequence* seq) { return seq->n_computed >= seq->prefill_target; });
  int64_t budget =
      decoding ? config_.chunked_prefill_size : std::max(config_.chunked_prefill_size, config_.prefill_size_alone);
  const std::vector<Sequence*> snapshot = running_;
  for (Sequence* seq : snapshot) {
    if (!seq->running) continue;  // preempted earlier in this loop
    const int64_t known = int64_t(seq->tokens.size());
    if (seq->n_computed >= seq->prefill_target) {  // decoding: the new token (after any the engine rolled back)
      if (ensure_decode_slot(seq))
        plan.push_back({seq, seq->n_computed, known - seq->n_computed + int64_t(seq->draft.size()), false, true});
      continue;
    }
    if (budget <= 0) continue;
    const int64_t count = prefill_count(seq, budget);
    if (count == 0) continue;
    budget -= count;
    plan.push_back({seq, seq->n_computed, count, true, seq->n_computed + count == known});
  }
  // A plan entry may belong to a sequence preempted after it was planned.
  std::erase_if(plan, [](const ScheduledChunk& chunk) { return !chunk.seq->running; });
  while (!waiting_.empty() && budget > 0 && n_running() < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (!admit(seq)) break;
    waiting_.pop_front();
    const int64_t known = int64_t(seq->tokens.size());
    const int64_t count = prefill_count(seq, budget);
    budget -= count;
    if (count > 0) plan.push_back({seq, seq->n_computed, count, true, seq->n_computed + count == known});
  }
  return plan;
}

void Scheduler::complete(const ScheduledChunk& chunk, int64_t computed) {
  Sequence* seq = chunk.seq;
  seq->n_computed = chunk.start + computed;
  blocks_.publish(seq->block_table, seq->tokens, seq->n_computed);
}

void Scheduler::remove(Sequence* seq) {
  if (seq->running) {
    stop_running(seq);
  } else {
    auto found = std::find(waiting_.begin(), waiting_.end(), seq);
    if (found != waiting_.end()) waiting_.erase(found);
  }
  blocks_.release(seq->block_table);
}

}  // namespace mlaserve
