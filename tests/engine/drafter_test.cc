// Prompt lookup proposes what followed the latest earlier occurrence of the longest suffix
// it finds; what --speculative may not name is refused by name.
#include "engine/drafter.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace mlaserve {
namespace {

std::vector<int32_t> propose(NgramDrafter& drafter, const std::vector<int32_t>& tokens, int64_t max_tokens) {
  const DraftRequest request{0, tokens, max_tokens};
  std::vector<std::vector<int32_t>> proposals;
  drafter.propose(std::span(&request, 1), proposals);
  return proposals.at(0);
}

TEST(NgramDrafter, ContinuesTheLongestSuffixAtItsLatestOccurrence) {
  NgramDrafter drafter(1, 3);
  // Suffix [7, 8, 9] occurs at 1 (followed by 4, 5) and at 6 (followed by 6): the latest wins.
  EXPECT_EQ(propose(drafter, {1, 7, 8, 9, 4, 5, 7, 8, 9, 6, 2, 7, 8, 9}, 5), (std::vector<int32_t>{6, 2, 7, 8, 9}));
  EXPECT_EQ(propose(drafter, {1, 7, 8, 9, 4, 5, 7, 8, 9, 6, 2, 7, 8, 9}, 2), (std::vector<int32_t>{6, 2}));
  // Only [9] recurs (the 3- and 2-token suffixes do not): what followed the last 9 before.
  EXPECT_EQ(propose(drafter, {9, 3, 4, 1, 9}, 4), (std::vector<int32_t>{3, 4, 1, 9}));
  EXPECT_TRUE(propose(drafter, {1, 2, 3, 4}, 4).empty());  // nothing recurs
  EXPECT_TRUE(propose(drafter, {5, 5, 5}, 0).empty());     // no room
}

TEST(NgramDrafter, MinimumLengthIsRespected) {
  NgramDrafter drafter(2, 3);
  EXPECT_TRUE(propose(drafter, {9, 3, 4, 1, 9}, 4).empty());  // only a 1-token suffix recurs
  EXPECT_EQ(propose(drafter, {1, 9, 3, 4, 1, 9}, 2), (std::vector<int32_t>{3, 4}));
}

TEST(MakeDrafter, NamesWhatItRefuses) {
  EXPECT_EQ(make_drafter("ngram")->describe(), "n-gram prompt lookup (1..4 tokens)");
  check_drafter_spec("mtp");
  for (const char* spec : {"dflash:", "dspark:/nonexistent", "draft:", "draft:/nonexistent", "eagle:x"})
    EXPECT_THROW(check_drafter_spec(spec), Error) << spec;
  try {
    make_drafter("medusa");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown --speculative 'medusa'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(NgramDrafter(3, 2), Error);
}

}  // namespace
}  // namespace mlaserve
