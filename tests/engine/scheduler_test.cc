#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <numeric>

namespace mlaserve {
namespace {

Sequence make_sequence(int64_t id, int n_prompt) {
  Sequence seq;
  seq.id = id;
  seq.tokens.resize(static_cast<size_t>(n_prompt));
  std::iota(seq.tokens.begin(), seq.tokens.end(), int32_t(id * 1000));
  seq.prompt_length = n_prompt;
  return seq;
}

// Runs a plan as the engine would: completes chunks and appends one token per logits chunk.
void run(Scheduler& scheduler, const std::vector<ScheduledChunk>& plan) {
  for (const auto& chunk : plan) {
    scheduler.complete(chunk, chunk.n_tokens);
    if (chunk.needs_logits) chunk.seq->tokens.push_back(7);
  }
}

TEST(Scheduler, ChunkedPrefillSharesTheBudgetAndMixesWithDecode) {
  BlockManager blocks(256, 16);
  Scheduler scheduler({8, 512, 0}, blocks);
  Sequence short_seq = make_sequence(0, 10), long_seq = make_sequence(1, 1000);
  scheduler.add(&short_seq);
  scheduler.add(&long_seq);
  auto plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].n_tokens, 10);
  EXPECT_TRUE(plan[0].needs_logits);
  EXPECT_EQ(plan[1].n_tokens, 502);  // the rest of the 512 budget
  EXPECT_FALSE(plan[1].needs_logits);
  run(scheduler, plan);
  plan = scheduler.schedule();  // decode of the short one beside the long prefill
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_FALSE(plan[0].prefill);
  EXPECT_EQ(plan[0].start, 10);
  EXPECT_EQ(plan[1].start, 502);
  EXPECT_EQ(plan[1].n_tokens, 498);
  EXPECT_TRUE(plan[1].needs_logits);
}

// With no sequence decoding, a step's prefill budget is prefill_size_alone: a long prompt
// alone takes 2,048 tokens a step; once another sequence decodes, chunked_prefill_size.
TEST(Scheduler, APrefillAloneTakesTheLargerBudgetUntilASequenceDecodes) {
  BlockManager blocks(1024, 16);
  Scheduler scheduler({8, 512, 2048}, blocks);
  Sequence short_seq = make_sequence(0, 10), long_seq = make_sequence(1, 5000);
  scheduler.add(&short_seq);
  scheduler.add(&long_seq);
  auto plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].n_tokens + plan[1].n_tokens, 2048);
  run(scheduler, plan);
  plan = scheduler.schedule();  // the short one decodes now
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_FALSE(plan[0].prefill);
  EXPECT_EQ(plan[1].n_tokens, 512);
  run(scheduler, plan);
  scheduler.remove(&short_seq);
  plan = scheduler.schedule();  // alone again
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].n_tokens, 2048);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  BlockManager blocks(256, 16);
  Scheduler scheduler({2, 512}, blocks);
  std::vector<Sequence> seqs;
  for (int i = 0; i < 4; ++i) seqs.push_back(make_sequence(i, 5));
  for (auto& seq : seqs) scheduler.add(&seq);
  EXPECT_EQ(scheduler.schedule().size(), 2u);
  EXPECT_EQ(scheduler.n_running(), 2);
  EXPECT_EQ(scheduler.n_waiting(), 2);
}

TEST(Scheduler, PreemptsTheYoungestWhenBlocksRunOut) {
  BlockManager blocks(4, 4);  // 16 positions in all
  Scheduler scheduler({8, 512}, blocks);
  Sequence old_seq = make_sequence(0, 7), young = make_sequence(1, 7);
  scheduler.add(&old_seq);
  scheduler.add(&young);
  run(scheduler, scheduler.schedule());  // both prefilled: 2 blocks each, 8 tokens known
  run(scheduler, scheduler.schedule());  // both decode position 7, still in their 2nd block
  const std::vector<int32_t> old_blocks = old_seq.block_table;
  // The old sequence's position 8 needs a third block: the young one is preempted.
  auto plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, &old_seq);
  EXPECT_EQ(scheduler.n_preemptions(), 1);
  EXPECT_FALSE(young.running);
  EXPECT_EQ(young.n_computed, 0);
  EXPECT_TRUE(young.block_table.empty());
  EXPECT_EQ(scheduler.n_waiting(), 1);
  EXPECT_EQ(std::vector<int32_t>(old_seq.block_table.begin(), old_seq.block_table.begin() + 2), old_blocks);
  run(scheduler, plan);
  scheduler.remove(&old_seq);
  plan = scheduler.schedule();  // readmitted: prompt and generated tokens recomputed
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].seq, &young);
  EXPECT_EQ(plan[0].n_tokens, 9);
  EXPECT_TRUE(plan[0].prefill);
}

TEST(Scheduler, RemoveFreesEverything) {
  BlockManager blocks(8, 4);
  Scheduler scheduler({8, 512}, blocks);
  Sequence a = make_sequence(0, 9), b = make_sequence(1, 3);
  scheduler.add(&a);
  scheduler.add(&b);
  run(scheduler, scheduler.schedule());
  scheduler.remove(&a);
  scheduler.remove(&b);
  EXPECT_EQ(blocks.used_blocks(), 0);
  EXPECT_EQ(scheduler.n_running(), 0);
}

// Recurrent state: running sequences hold distinct state slots, returned when they stop; a
// prefill chunk that does not finish its prompt ends on a block boundary; a cached prefix is
// reused only as far as restorable_blocks allows, and the sequence is told to restore there.
TEST(Scheduler, RecurrentStateSlotsBoundariesAndRestores) {
  BlockManager blocks(64, 4);
  SchedulerConfig config{2, 10, 0};
  config.recurrent_state = true;
  int64_t restorable = 0;
  config.restorable_blocks = [&](std::span<const int32_t>, int64_t cached) { return std::min(cached, restorable); };
  Scheduler scheduler(config, blocks);
  Sequence a = make_sequence(0, 23), b = make_sequence(1, 5), c = make_sequence(2, 5);
  for (Sequence* seq : {&a, &b, &c}) scheduler.add(seq);
  auto plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 1u);      // b waits: the budget of 10 went to a's first chunk
  EXPECT_EQ(plan[0].n_tokens, 8);  // 10 rounded down to a block boundary
  run(scheduler, plan);
  plan = scheduler.schedule();
  EXPECT_EQ(plan[0].start, 8);
  EXPECT_EQ(plan[0].n_tokens, 8);
  ASSERT_EQ(plan.size(), 1u);  // b's whole prompt (5) does not fit the 2 tokens left
  EXPECT_GE(a.state_slot, 0);
  run(scheduler, plan);
  run(scheduler, scheduler.schedule());
  EXPECT_EQ(scheduler.n_running(), 2);
  EXPECT_NE(a.state_slot, b.state_slot);
  EXPECT_GE(b.state_slot, 0);
  EXPECT_EQ(c.state_slot, -1);  // waiting: max_num_seqs 2
  const int32_t freed = a.state_slot;
  scheduler.remove(&a);
  Sequence again = make_sequence(0, 23);  // a's prompt: its first 5 blocks are cached
  restorable = 3;
  scheduler.add(&again);
  run(scheduler, scheduler.schedule());
  EXPECT_EQ(c.state_slot, freed);  // c came first in the queue
  scheduler.remove(&c);
  plan = scheduler.schedule();
  EXPECT_EQ(again.n_computed, 12);  // 3 restorable blocks of the 5 cached
  EXPECT_EQ(again.restore_tokens, 12);
  EXPECT_GE(again.state_slot, 0);
}

// A recurrent model's prompt stops at its last whole block, where the engine keeps a snapshot
// for a longer prompt to resume from (a conversation's next turn), then finishes in the next
// step; a prompt of whole blocks finishes at once.
TEST(Scheduler, RecurrentPromptsStopAtTheirLastWholeBlock) {
  BlockManager blocks(64, 4);
  SchedulerConfig config{2, 64};
  config.recurrent_state = true;
  Scheduler scheduler(config, blocks);
  Sequence a = make_sequence(0, 23), b = make_sequence(1, 12);
  scheduler.add(&a);
  scheduler.add(&b);
  auto plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].n_tokens, 20);
  EXPECT_FALSE(plan[0].needs_logits);
  EXPECT_EQ(plan[1].n_tokens, 12);
  EXPECT_TRUE(plan[1].needs_logits);
  run(scheduler, plan);
  plan = scheduler.schedule();
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].start, 20);
  EXPECT_EQ(plan[0].n_tokens, 3);
  EXPECT_TRUE(plan[0].needs_logits);
}

}  // namespace
}  // namespace mlaserve
