#include "common/state/key_groups.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace weir::state {
namespace {

// The hash is part of the checkpoint format: these values (checked against an
// independent implementation) must never change.
TEST(KeyGroupsTest, HashIsPinned) {
  EXPECT_EQ(StableHash64(""), 0xefd01f60ba992926ULL);
  EXPECT_EQ(StableHash64("a"), 0x82a2a958a9bece5bULL);
  EXPECT_EQ(StableHash64("user-42"), 0xa39532c7ab051e8dULL);
  EXPECT_EQ(KeyGroupForKey("user-42"), 13);
  EXPECT_EQ(KeyGroupForKey(std::string("\0\x01\xff", 3), 1000), 562);
}

TEST(KeyGroupsTest, DeterministicAndInRange) {
  for (int max_parallelism : {1, 7, 128, 32768}) {
    for (int i = 0; i < 2000; ++i) {
      std::string key = absl::StrCat("key-", i);
      int group = KeyGroupForKey(key, max_parallelism);
      EXPECT_GE(group, 0);
      EXPECT_LT(group, max_parallelism);
      EXPECT_EQ(group, KeyGroupForKey(std::string(key), max_parallelism));
    }
  }
}

TEST(KeyGroupsTest, SpreadsKeysOverKeyGroups) {
  constexpr int kKeys = 128000;
  std::vector<int> per_group(kDefaultMaxParallelism, 0);
  for (int i = 0; i < kKeys; ++i) ++per_group[KeyGroupForKey(absl::StrCat(i))];
  const int expected = kKeys / kDefaultMaxParallelism;  // 1000
  // A uniform hash stays within ~4 standard deviations (~32) of the mean.
  EXPECT_GT(*std::min_element(per_group.begin(), per_group.end()), expected * 85 / 100);
  EXPECT_LT(*std::max_element(per_group.begin(), per_group.end()), expected * 115 / 100);

  // Sequential integer keys in binary (little-endian int64) spread as well.
  std::vector<int> per_subtask(4, 0);
  for (int64_t i = 0; i < 40000; ++i) {
    std::string key(reinterpret_cast<const char*>(&i), sizeof(i));
    ++per_subtask[SubtaskForKeyGroup(KeyGroupForKey(key), kDefaultMaxParallelism, 4)];
  }
  for (int count : per_subtask) {
    EXPECT_GT(count, 9000);
    EXPECT_LT(count, 11000);
  }
}

TEST(KeyGroupsTest, SubtasksOwnContiguousBalancedRanges) {
  for (int parallelism : {1, 2, 3, 5, 127, 128}) {
    std::vector<int> groups_of(parallelism, 0);
    int previous = 0;
    for (int group = 0; group < kDefaultMaxParallelism; ++group) {
      int subtask = SubtaskForKeyGroup(group, kDefaultMaxParallelism, parallelism);
      ASSERT_GE(subtask, 0);
      ASSERT_LT(subtask, parallelism);
      ASSERT_TRUE(subtask == previous || subtask == previous + 1) << "ranges must be contiguous";
      previous = subtask;
      ++groups_of[subtask];
    }
    EXPECT_EQ(SubtaskForKeyGroup(0, kDefaultMaxParallelism, parallelism), 0);
    EXPECT_EQ(SubtaskForKeyGroup(kDefaultMaxParallelism - 1, kDefaultMaxParallelism, parallelism), parallelism - 1);
    for (int count : groups_of) {
      EXPECT_GE(count, kDefaultMaxParallelism / parallelism);
      EXPECT_LE(count, kDefaultMaxParallelism / parallelism + 1);
    }
  }
  // No int overflow with large max parallelism.
  EXPECT_EQ(SubtaskForKeyGroup(32767, 32768, 32768), 32767);
}

// The ranges of a vertex's subtasks cover every key group exactly once, in
// order, and agree with SubtaskForKeyGroup (which routes the records).
TEST(KeyGroupsTest, RangesPartitionTheKeyGroupsAsRoutingDoes) {
  for (int max_parallelism : {1, 2, 7, 100, 128, 1000}) {
    for (int parallelism = 1; parallelism <= std::min(max_parallelism, 67); ++parallelism) {
      int next = 0;
      for (int subtask = 0; subtask < parallelism; ++subtask) {
        KeyGroupRange range = KeyGroupRangeForSubtask(max_parallelism, parallelism, subtask);
        ASSERT_EQ(range.start, next) << max_parallelism << "/" << parallelism << "/" << subtask;
        ASSERT_GE(range.size(), 1);
        for (int g = range.start; g < range.end; ++g) {
          ASSERT_EQ(SubtaskForKeyGroup(g, max_parallelism, parallelism), subtask) << g;
        }
        next = range.end;
      }
      ASSERT_EQ(next, max_parallelism);
    }
  }
  EXPECT_EQ(KeyGroupRangeForSubtask(128, 3, 1).DebugString(), "[43, 86)");
}

}  // namespace
}  // namespace weir::state
