// StateSnapshots' bookkeeping: a state is found by its prefix hash and length, written once,
// empty slots are filled first, and the least recently used is replaced after them.
#include "engine/state_snapshots.h"

#include <gtest/gtest.h>

namespace mlaserve {
namespace {

TEST(StateSnapshots, FindsWhatWasWrittenByHashAndLength) {
  StateSnapshots snapshots(2);
  EXPECT_FALSE(snapshots.find(7, 16));
  const auto slot = snapshots.slot_to_write(7, 16);
  ASSERT_TRUE(slot);
  EXPECT_EQ(snapshots.find(7, 16), slot);
  EXPECT_FALSE(snapshots.find(7, 32));  // same hash, another length: another prefix
  EXPECT_FALSE(snapshots.find(8, 16));
  EXPECT_FALSE(snapshots.slot_to_write(7, 16));  // already kept: nothing to write
}

TEST(StateSnapshots, FillsEmptySlotsThenReplacesTheLeastRecentlyUsed) {
  StateSnapshots snapshots(2);
  const auto a = snapshots.slot_to_write(1, 16), b = snapshots.slot_to_write(2, 16);
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_TRUE(snapshots.find(1, 16));  // 1 is now more recent than 2
  EXPECT_EQ(snapshots.slot_to_write(3, 16), b);
  EXPECT_FALSE(snapshots.find(2, 16));
  EXPECT_TRUE(snapshots.find(1, 16) && snapshots.find(3, 16));
}

TEST(StateSnapshots, NoSlotsKeepNothing) {
  StateSnapshots snapshots(0);
  EXPECT_FALSE(snapshots.slot_to_write(1, 16));
  EXPECT_FALSE(snapshots.find(1, 16));
}

}  // namespace
}  // namespace mlaserve
