#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/state/key_groups.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/state/in_memory_keyed_state.h"
#include "taskmanager/state/operator_state.h"

namespace weir::taskmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr int kMaxParallelism = 128;

// Fills subtask `subtask` of `parallelism` with values for every key of
// `keys` it owns: "count" = key + "-c", "name" = key + "-n".
InMemoryKeyedState Filled(int parallelism, int subtask, const std::vector<std::string>& keys) {
  InMemoryKeyedState state(state::KeyGroupRangeForSubtask(kMaxParallelism, parallelism, subtask), kMaxParallelism);
  for (const std::string& key : keys) {
    if (!state.range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
    state.SetCurrentKey(key);
    state.Put("count", key + "-c");
    state.Put("name", key + "-n");
  }
  return state;
}

std::vector<std::string> Keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat("user-", i));
  keys.push_back(std::string("\0bin\xff", 5));  // keys are bytes
  return keys;
}

TEST(InMemoryKeyedStateTest, SnapshotAndRestoreRoundTripPerKeyGroup) {
  const std::vector<std::string> keys = Keys(500);
  InMemoryKeyedState original = Filled(1, 0, keys);
  ASSERT_EQ(original.size(), keys.size() * 2);
  original.SetCurrentKey("user-7");
  original.Remove("name");

  InMemoryKeyedState restored(original.range(), kMaxParallelism);
  for (int g = original.range().start; g < original.range().end; ++g) {
    ASSERT_TRUE(restored.RestoreKeyGroup(g, original.SnapshotKeyGroup(g)).ok());
    EXPECT_EQ(restored.SnapshotKeyGroup(g), original.SnapshotKeyGroup(g)) << "deterministic bytes";
  }
  EXPECT_EQ(restored.size(), original.size());
  for (const std::string& key : keys) {
    restored.SetCurrentKey(key);
    EXPECT_EQ(restored.Get("count"), key + "-c");
    if (key == "user-7") {
      EXPECT_EQ(restored.Get("name"), std::nullopt);
    } else {
      EXPECT_EQ(restored.Get("name"), key + "-n");
    }
  }
}

// Rescaling: the key groups of 3 subtasks handed to 2 by range arrive whole.
TEST(InMemoryKeyedStateTest, KeyGroupsMoveToSubtasksOfAnotherParallelism) {
  const std::vector<std::string> keys = Keys(300);
  std::map<int, std::string> by_group;
  for (int subtask = 0; subtask < 3; ++subtask) {
    InMemoryKeyedState old = Filled(3, subtask, keys);
    for (int g = old.range().start; g < old.range().end; ++g) by_group[g] = old.SnapshotKeyGroup(g);
  }
  size_t total = 0;
  for (int subtask = 0; subtask < 2; ++subtask) {
    InMemoryKeyedState next(state::KeyGroupRangeForSubtask(kMaxParallelism, 2, subtask), kMaxParallelism);
    for (int g = next.range().start; g < next.range().end; ++g) ASSERT_TRUE(next.RestoreKeyGroup(g, by_group[g]).ok());
    for (const std::string& key : keys) {
      if (!next.range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
      next.SetCurrentKey(key);
      EXPECT_EQ(next.Get("count"), key + "-c") << key;
    }
    total += next.size();
  }
  EXPECT_EQ(total, keys.size() * 2);
}

TEST(InMemoryKeyedStateTest, RefusesCorruptBytesAndForeignKeys) {
  InMemoryKeyedState state(state::KeyGroupRangeForSubtask(kMaxParallelism, 2, 0), kMaxParallelism);
  absl::Status corrupt = state.RestoreKeyGroup(0, "\x7f" "abc");
  EXPECT_EQ(corrupt.code(), absl::StatusCode::kDataLoss) << corrupt;
  EXPECT_EQ(state.RestoreKeyGroup(127, "").code(), absl::StatusCode::kInvalidArgument);
  // A key of the other subtask's range is a routing bug, not silent state.
  std::string foreign;
  for (int i = 0; foreign.empty(); ++i) {
    std::string key = absl::StrCat("k", i);
    if (!state.range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) foreign = key;
  }
  EXPECT_THROW(state.SetCurrentKey(foreign), std::logic_error);
}

TEST(OperatorStateTest, ListStatesSnapshotAndRestore) {
  OperatorStateBackend backend;
  backend.GetListState("offsets")->Update({"p0:10", "p1:20"});
  backend.GetUnionListState("watermarks")->Add("w5");
  OperatorStateSnapshot snapshot = backend.Snapshot();
  EXPECT_THAT(snapshot["offsets"].entries, ElementsAre("p0:10", "p1:20"));
  EXPECT_FALSE(snapshot["offsets"].is_union);
  EXPECT_TRUE(snapshot["watermarks"].is_union);

  OperatorStateBackend restored(snapshot);
  EXPECT_THAT(restored.GetListState("offsets")->Get(), ElementsAre("p0:10", "p1:20"));
  // Restored state the operator does not ask for again is kept.
  EXPECT_EQ(restored.Snapshot(), snapshot);
  EXPECT_THROW(restored.GetUnionListState("offsets"), std::invalid_argument);
  OperatorStateBackend mismatch(snapshot);
  EXPECT_THROW(mismatch.GetListState("watermarks"), std::invalid_argument);
}

TEST(OperatorStateTest, RedistributionSplitsListsAndCopiesUnions) {
  std::vector<OperatorStateSnapshot> old(2);
  old[0]["offsets"] = {false, {"a", "b", "c"}};
  old[1]["offsets"] = {false, {"d", "e"}};
  old[0]["all"] = {true, {"x"}};
  old[1]["all"] = {true, {"y"}};

  // Same parallelism: every subtask gets its own state back.
  EXPECT_EQ(RedistributeOperatorState(old, 2), old);

  for (int parallelism : {1, 3, 7}) {
    std::vector<OperatorStateSnapshot> next = RedistributeOperatorState(old, parallelism);
    ASSERT_EQ(static_cast<int>(next.size()), parallelism);
    std::vector<std::string> split;
    for (const OperatorStateSnapshot& s : next) {
      split.insert(split.end(), s.at("offsets").entries.begin(), s.at("offsets").entries.end());
      EXPECT_THAT(s.at("all").entries, ElementsAre("x", "y"));
      EXPECT_TRUE(s.at("all").is_union);
    }
    EXPECT_THAT(split, UnorderedElementsAreArray({"a", "b", "c", "d", "e"})) << parallelism;
  }
}

}  // namespace
}  // namespace weir::taskmanager
