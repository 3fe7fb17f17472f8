// Continuous batching, as pure logic over sequences and the block manager (no model, no
// threads). Each step runs every running sequence: one decode token (and its draft, under
// speculative decoding) for those past their prompt, a chunk of at most the remaining prefill budget for those still
// prefilling; then admits waiting sequences FIFO while the budget, max_num_seqs and free blocks allow. When a decoding
// sequence needs a block and none is free, the youngest running sequence is preempted: its blocks are freed and it
// waits at the front of the queue to be recomputed (prompt and generated tokens alike).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <vector>

#include "engine/block_manager.h"

namespace mlaserve {

struct SchedulerConfig {
  int64_t max_num_seqs = 64;           // running sequences at most
  int64_t chunked_prefill_size = 512;  // prefill tokens per step, all sequences together
  // Prefill tokens per step when no running sequence is decoding (a long prompt alone): each
  // chunk of a long prompt re-expands every cached key of the expanded form, so larger chunks
  // cost less (mini, 16,384 tokens through serve: 512 a step 76% of the one-shot prefill rate,
  // 2,048 97%); decoding sequences keep chunked_prefill_size, so a step stalls them no longer.
  int64_t prefill_size_alone = 2048;
  // Models with recurrent layers (KDA): each running sequence holds one of max_num_seqs state
  // slots. A cached prefix is reused only up to a block boundary where a snapshot of the state
  // was kept (restorable_blocks: of the first n cached blocks of these tokens, how many lead to
  // a snapshot); otherwise a new or preempted sequence is computed from its first token.
  // Prefill chunks that do not finish the prompt end on block boundaries, where snapshots are
  // taken.
  bool recurrent_state = false;
  std::function<int64_t(std::span<const int32_t> tokens, int64_t cached_blocks)> restorable_blocks = nullptr;
  // Called with a waiting sequence's tokens before it is admitted: the prefix cache's disk tier
  // puts the blocks it holds of them into the block pool.
  std::function<void(std::span<const int32_t> tokens)> before_admit = nullptr;
};

struct Sequence {
  int64_t id = 0;               // arrival order; larger is younger
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_length = 0;
  int64_t n_computed = 0;      // positions whose latents are in the cache
  int64_t prefill_target = 0;  // tokens to (re)compute before decoding: len(tokens) at admission
  std::vector<int32_t> block_table;
  bool running = false;
  int64_t preemptions = 0;
  int32_t state_slot = -1;     // recurrent_state: the slot this running sequence holds
  int64_t restore_tokens = 0;  // recurrent_state: load the snapshot after this many tokens first
  // Speculative decoding: tokens proposed to follow `tokens`, verified in the sequence's next
  // decode step (which then computes 1 + draft.size() positions); cleared by preemption.
  std::vector<int32_t> draft;
};

struct ScheduledChunk {
  Sequence* seq;
  int64_t start;  // first position computed this step (== seq->n_computed)
  int64_t n_tokens;
  bool prefill;       // false: a decode step (the last token, then the sequence's draft)
  bool needs_logits;  // the chunk ends at the last known token
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks);

  void add(Sequence* seq) { waiting_.push_back(seq); }
  // Plans one step. Sequences preempted while planning are in waiting again.
  std::vector<ScheduledChunk> schedule();
  // After a step: the chunk's first `computed` positions are in the cache (all of them, or the
  // last token and the accepted drafts of a decode step); full blocks become cached prefixes.
  void complete(const ScheduledChunk& chunk, int64_t computed);
  // Removes a sequence (finished or cancelled) from either queue and frees its blocks.
  void remove(Sequence* seq);

  int64_t n_running() const { return int64_t(running_.size()); }
  int64_t n_waiting() const { return int64_t(waiting_.size()); }
  int64_t n_preemptions() const { return preemptions_; }

 private:
  bool admit(Sequence* seq);
  void preempt(Sequence* seq);
  bool ensure_decode_slot(Sequence* seq);                            // may preempt younger sequences, or seq itself
  void stop_running(Sequence* seq);                                  // leaves running_, returns its state slot
  int64_t prefill_count(const Sequence* seq, int64_t budget) const;  // tokens of its next prefill chunk

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  std::vector<int32_t> free_state_slots_;
  int64_t preemptions_ = 0;
};

}  // namespace mlaserve
