#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace mlaserve {
namespace {

std::vector<int32_t> iota_tokens(int n, int first = 100) {
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(BlockManager, AllocateAndReleaseAccountForEveryBlock) {
  BlockManager blocks(8, 4);
  auto a = blocks.allocate(iota_tokens(5), 6);  // 6 positions -> 2 blocks
  ASSERT_TRUE(a);
  EXPECT_EQ(a->blocks.size(), 2u);
  EXPECT_EQ(a->cached_tokens, 0);
  EXPECT_EQ(blocks.available_blocks(), 6);
  EXPECT_FALSE(blocks.allocate(iota_tokens(30), 31));  // 8 blocks needed, 6 left
  EXPECT_TRUE(blocks.grow(a->blocks, 9));
  EXPECT_EQ(a->blocks.size(), 3u);
  blocks.release(a->blocks);
  EXPECT_EQ(blocks.available_blocks(), 8);
  EXPECT_TRUE(a->blocks.empty());
}

TEST(BlockManager, PublishedPrefixIsSharedAndCounted) {
  BlockManager blocks(16, 4);
  const auto prompt = iota_tokens(10);
  auto first = blocks.allocate(prompt, 11);
  ASSERT_TRUE(first);
  blocks.publish(first->blocks, prompt, 10);  // blocks 0 and 1 are full
  auto tokens = iota_tokens(8);
  tokens.push_back(7);
  tokens.push_back(8);  // same 8-token prefix, different tail
  auto second = blocks.allocate(tokens, 11);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->cached_tokens, 8);
  EXPECT_EQ(second->blocks[0], first->blocks[0]);
  EXPECT_EQ(second->blocks[1], first->blocks[1]);
  EXPECT_NE(second->blocks[2], first->blocks[2]);
  blocks.release(first->blocks);  // shared blocks stay with the second sequence
  EXPECT_EQ(blocks.used_blocks(), 3);
  EXPECT_EQ(blocks.prefix_hit_tokens(), 8);
  EXPECT_EQ(blocks.prefix_queried_tokens(), 20);
}

TEST(BlockManager, NeverReusesTheBlockOfTheLastToken) {
  BlockManager blocks(16, 4);
  const auto prompt = iota_tokens(8);
  auto first = blocks.allocate(prompt, 9);
  blocks.publish(first->blocks, prompt, 8);
  blocks.release(first->blocks);
  auto again = blocks.allocate(prompt, 9);  // identical prompt: the last token is recomputed
  ASSERT_TRUE(again);
  EXPECT_EQ(again->cached_tokens, 4);
}

TEST(BlockManager, EvictsLeastRecentlyUsedCachedBlocks) {
  BlockManager blocks(4, 2);
  const auto old_prompt = iota_tokens(5, 0), new_prompt = iota_tokens(5, 50);
  auto a = blocks.allocate(old_prompt, 5);
  blocks.publish(a->blocks, old_prompt, 4);
  blocks.release(a->blocks);                // 2 published blocks cached, 1 free
  auto b = blocks.allocate(new_prompt, 7);  // needs all 4 blocks: evicts both cached
  ASSERT_TRUE(b);
  blocks.publish(b->blocks, new_prompt, 4);
  blocks.release(b->blocks);
  auto c = blocks.allocate(old_prompt, 5);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cached_tokens, 0);  // evicted
  blocks.release(c->blocks);
}

// Rounds of 16 sequences whose 2 full blocks are published then released, in a pool that
// caches 2 rounds: each round evicts older blocks, so the hash index keeps erasing and
// inserting (at half load, with collisions). The latest round must be found whole, one three
// rounds old not at all.
TEST(BlockManager, HashIndexFollowsEvictionChurn) {
  BlockManager blocks(64, 2);
  const auto sequence = [](int round, int s) { return iota_tokens(5, round * 1000 + s * 10); };
  for (int round = 0; round < 200; ++round) {
    std::vector<std::vector<int32_t>> tables;
    for (int s = 0; s < 16; ++s) {
      auto allocation = blocks.allocate(sequence(round, s), 5);
      ASSERT_TRUE(allocation) << "round " << round;
      blocks.publish(allocation->blocks, sequence(round, s), 4);
      tables.push_back(std::move(allocation->blocks));
    }
    for (auto& table : tables) blocks.release(table);
    ASSERT_EQ(blocks.available_blocks(), 64);
    for (int s = 0; s < 16; ++s) {
      ASSERT_EQ(blocks.cached_prefix_blocks(sequence(round, s)), 2) << "round " << round << ", sequence " << s;
      if (round >= 3) {
        ASSERT_EQ(blocks.cached_prefix_blocks(sequence(round - 3, s)), 0) << "round " << round;
      }
    }
  }
}

// The disk tier's hooks: an evicted cached block is reported with its prefix hash and tokens
// before reuse; an adopted block extends a cached prefix (the prefix's blocks are not evicted
// to make room for it) and is then found by allocate() like a computed one.
TEST(BlockManager, EvictionReportsAndAdoptionExtendsACachedPrefix) {
  BlockManager blocks(3, 4);
  std::vector<std::pair<uint64_t, std::vector<int32_t>>> evicted;
  blocks.on_evict([&](int32_t, uint64_t hash, std::span<const int32_t> tokens) {
    evicted.emplace_back(hash, std::vector<int32_t>(tokens.begin(), tokens.end()));
  });
  const auto prompt = iota_tokens(17);                          // 4 full blocks, a 5th for the last token
  auto first = blocks.allocate(std::span(prompt).first(9), 9);  // blocks 0-2 (positions 0-8)
  ASSERT_TRUE(first);
  blocks.publish(first->blocks, prompt, 8);  // blocks 0 and 1 cached
  blocks.release(first->blocks);
  int visited = 0;
  blocks.visit_cached([&](int32_t, uint64_t hash, std::span<const int32_t>) {
    visited += hash == blocks.prefix_hash(prompt, 1) || hash == blocks.prefix_hash(prompt, 2);
  });
  EXPECT_EQ(visited, 2);
  // Block 2 of the prompt from elsewhere: the one free block takes it, the prefix stays.
  std::vector<int64_t> filled;
  const auto fill = [&](int32_t, int64_t block, uint64_t hash) {
    EXPECT_EQ(hash, blocks.prefix_hash(prompt, block + 1));
    filled.push_back(block);
    return true;
  };
  const int64_t adopted = blocks.adopt(prompt, 2, 1, fill);
  ASSERT_EQ(adopted, 1);
  EXPECT_EQ(filled, std::vector<int64_t>{2});
  EXPECT_TRUE(evicted.empty());
  EXPECT_EQ(blocks.cached_prefix_blocks(prompt), 3);
  EXPECT_EQ(blocks.adopt(prompt, 3, 1, fill), 0);  // every block holds the prefix: nothing to take
  // Another prompt needs all three blocks: each cached block is reported as it goes, oldest first.
  auto other = blocks.allocate(iota_tokens(12, 5000), 12);
  ASSERT_TRUE(other);
  ASSERT_EQ(evicted.size(), 3u);
  EXPECT_EQ(evicted[0].first, blocks.prefix_hash(prompt, 1));
  EXPECT_EQ(evicted[0].second, std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
  EXPECT_EQ(evicted[2].first, blocks.prefix_hash(prompt, 3));
}

}  // namespace
}  // namespace mlaserve
