// The keyed state backends (rocksdb and hashmap) behind one interface: every
// state type of the typed API, and snapshots restored per key-group range —
// at the same parallelism and at another one — through real files in a
// temporary checkpoint directory.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/state/key_groups.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/eventtime/timer_service.h"
#include "taskmanager/state/in_memory_keyed_state.h"
#include "taskmanager/state/operator_state.h"
#include "taskmanager/state/rocksdb_keyed_state.h"
#include "weir/state.h"

namespace weir::taskmanager {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::Pair;

constexpr int kMaxParallelism = 128;

class KeyedStateBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("keyed-state-", GetParam(), "-", ::testing::UnitTest::GetInstance()->random_seed(), "-",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "checkpoint");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::unique_ptr<KeyedStateBackend> Make(int parallelism, int subtask) {
    const state::KeyGroupRange range = state::KeyGroupRangeForSubtask(kMaxParallelism, parallelism, subtask);
    if (GetParam() == "hashmap") return std::make_unique<InMemoryKeyedState>(range, kMaxParallelism);
    RocksDbStateOptions options;
    options.instance_dir = (root_ / absl::StrCat("instance-", next_instance_++)).string();
    options.write_buffer_bytes = 1 << 20;
    auto backend = RocksDbKeyedState::Open(range, kMaxParallelism, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return std::move(*backend);
  }

  // Snapshot `id` written into the checkpoint directory, as a restore gets it.
  KeyedStateRestore Checkpoint(KeyedStateBackend& backend, int64_t id, const std::string& base) {
    auto snapshot = backend.Snapshot(id);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    KeyedStateRestore restore;
    restore.checkpoint_dir = (root_ / "checkpoint").string();
    absl::Status written = (*snapshot)->Write(restore.checkpoint_dir, base, &restore.snapshot);
    EXPECT_TRUE(written.ok()) << written;
    return restore;
  }

  // Fills every key of `keys` the backend owns with one of each state type.
  static void Fill(KeyedStateBackend& backend, const std::vector<std::string>& keys) {
    for (const std::string& key : keys) {
      if (!backend.range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
      backend.SetCurrentKey(key);
      ValueState<std::string>(&backend, "value").Set(key + "-v");
      ListState<int64_t> list(&backend, "list");
      list.Add(1);
      list.Add(2);
      MapState<std::string, int64_t> map(&backend, "map");
      map.Put("b", 2);
      map.Put("a", 1);
      ReducingState<int64_t>(&backend, "sum", [](int64_t a, int64_t b) { return a + b; }).Add(40);
    }
  }

  static void ExpectFilled(KeyedStateBackend& backend, const std::string& key) {
    backend.SetCurrentKey(key);
    EXPECT_EQ(ValueState<std::string>(&backend, "value").Get(), key + "-v") << key;
    EXPECT_THAT(ListState<int64_t>(&backend, "list").Get(), ElementsAre(1, 2)) << key;
    EXPECT_THAT((MapState<std::string, int64_t>(&backend, "map").Entries()), ElementsAre(Pair("a", 1), Pair("b", 2)))
        << key;
    EXPECT_EQ(ReducingState<int64_t>(&backend, "sum", [](int64_t a, int64_t b) { return a + b; }).Get(), 40) << key;
  }

  static std::vector<std::string> Keys(int n) {
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat("user-", i));
    keys.push_back(std::string("\0bin\xff", 5));  // keys are bytes
    return keys;
  }

  // A backend with a timer service on it, restored (from nothing).
  struct Timed {
    explicit Timed(std::unique_ptr<KeyedStateBackend> b,
                   int snapshots_before_write = InternalTimerService::kDefaultSnapshotsBeforeWrite)
        : backend(std::move(b)),
          timers(backend.get(), &operator_state, kMaxParallelism, &element_time, snapshots_before_write) {
      timers.Restore();
    }
    int64_t element_time = kNoTimestamp;
    std::unique_ptr<KeyedStateBackend> backend;
    OperatorStateBackend operator_state;
    InternalTimerService timers;
  };

  // An incremental rocksdb backend whose snapshots make one file per column
  // family and start no compaction (it would rewrite files and make the
  // sizes the tests compare vary).
  std::unique_ptr<RocksDbKeyedState> OpenIncremental() {
    RocksDbStateOptions options;
    options.instance_dir = (root_ / "incremental-instance").string();
    options.write_buffer_bytes = 64 << 20;
    options.incremental = true;
    auto backend =
        RocksDbKeyedState::Open(state::KeyGroupRangeForSubtask(kMaxParallelism, 1, 0), kMaxParallelism, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return std::move(*backend);
  }

  // An incremental snapshot written into <root>/job/chk-<id>, with the bytes
  // it wrote and those it referred to.
  struct Written {
    KeyedStateRestore restore;
    int64_t written = 0, reused = 0;
    int64_t written_shared = 0;                // of `written`: into shared/
    std::vector<std::string> uploaded_shared;  // their shared names
  };
  Written CheckpointIncrementally(KeyedStateBackend& backend, int64_t id) {
    Written out;
    out.restore.checkpoint_dir = (root_ / "job" / absl::StrCat("chk-", id)).string();
    fs::create_directories(out.restore.checkpoint_dir);
    auto snapshot = backend.Snapshot(id);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    absl::Status written = (*snapshot)->Write(out.restore.checkpoint_dir, "v1-s0", &out.restore.snapshot);
    EXPECT_TRUE(written.ok()) << written;
    for (const v1::StateFileProto& f : out.restore.snapshot.keyed_files().files()) {
      (f.reused() ? out.reused : out.written) += f.size_bytes();
      if (absl::EndsWith(f.name(), ".sst")) {
        EXPECT_FALSE(f.shared_name().empty()) << f.name();
        EXPECT_TRUE(fs::exists(root_ / "job" / "shared" / f.shared_name())) << f.shared_name();
        if (!f.reused()) {
          out.written_shared += f.size_bytes();
          out.uploaded_shared.push_back(f.shared_name());
        }
      }
    }
    return out;
  }

  fs::path root_;
  int next_instance_ = 0;
};

TEST_P(KeyedStateBackendTest, EveryStateTypeReadsBackWhatWasWritten) {
  std::unique_ptr<KeyedStateBackend> backend = Make(1, 0);
  backend->SetCurrentKey("alice");
  ValueState<int64_t> count(backend.get(), "count");
  EXPECT_EQ(count.Get(), std::nullopt);
  count.Set(5);
  EXPECT_EQ(count.Get(), 5);

  ListState<std::string> list(backend.get(), "events");
  EXPECT_TRUE(list.Get().empty());
  list.Add("x");
  list.Add(std::string("\0y", 2));
  EXPECT_THAT(list.Get(), ElementsAre("x", std::string("\0y", 2)));
  list.Update({"z"});
  EXPECT_THAT(list.Get(), ElementsAre("z"));

  MapState<std::string, std::string> map(backend.get(), "last");
  map.Put("k2", "v2");
  map.Put("k1", "v1");
  map.Put("", "empty key");
  EXPECT_EQ(map.Get("k1"), "v1");
  EXPECT_FALSE(map.Contains("k3"));
  map.Remove("k2");
  EXPECT_THAT(map.Entries(), ElementsAre(Pair("", "empty key"), Pair("k1", "v1")));

  ReducingState<int64_t> max(backend.get(), "max", [](int64_t a, int64_t b) { return std::max(a, b); });
  max.Add(3);
  max.Add(9);
  max.Add(4);
  EXPECT_EQ(max.Get(), 9);

  // Another key sees none of it; its map does not leak into alice's (a key
  // that is a prefix of another).
  backend->SetCurrentKey("alic");
  EXPECT_EQ(count.Get(), std::nullopt);
  EXPECT_TRUE(list.Get().empty());
  EXPECT_TRUE(map.Entries().empty());
  map.Put("other", "o");
  backend->SetCurrentKey("alice");
  EXPECT_EQ(map.Entries().size(), 2u);

  map.Clear();
  list.Clear();
  count.Clear();
  EXPECT_TRUE(map.Entries().empty());
  EXPECT_TRUE(list.Get().empty());
  EXPECT_EQ(count.Get(), std::nullopt);
  backend->SetCurrentKey("alic");
  EXPECT_EQ(map.Get("other"), "o");
}

TEST_P(KeyedStateBackendTest, SnapshotRestoresEveryStateTypeAtTheSameRange) {
  const std::vector<std::string> keys = Keys(400);
  std::unique_ptr<KeyedStateBackend> original = Make(2, 1);
  Fill(*original, keys);
  std::string changed;  // a key this subtask owns
  for (const std::string& key : keys) {
    if (changed.empty() && original->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) changed = key;
  }
  // Writes after the synchronous part, before the asynchronous one, are not
  // in the snapshot (they go to the buffer of the log, or to a new log).
  auto pending = original->Snapshot(1);
  ASSERT_TRUE(pending.ok()) << pending.status();
  original->SetCurrentKey(changed);
  ValueState<std::string>(original.get(), "value").Set("changed");
  KeyedStateRestore first;
  first.checkpoint_dir = (root_ / "checkpoint").string();
  ASSERT_TRUE((*pending)->Write(first.checkpoint_dir, "v1-s1", &first.snapshot).ok());
  KeyedStateRestore second = Checkpoint(*original, 2, "v1-s1-2");
  original.reset();  // the snapshots do not depend on the instance

  std::unique_ptr<KeyedStateBackend> restored = Make(2, 1);
  ASSERT_TRUE(restored->Restore({first}).ok());
  int owned = 0;
  for (const std::string& key : keys) {
    if (!restored->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
    ++owned;
    ExpectFilled(*restored, key);
  }
  EXPECT_GT(owned, 100);

  std::unique_ptr<KeyedStateBackend> later = Make(2, 1);
  ASSERT_TRUE(later->Restore({second}).ok());
  for (const std::string& key : keys) {
    if (!later->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
    later->SetCurrentKey(key);
    EXPECT_EQ(ValueState<std::string>(later.get(), "value").Get(), key == changed ? "changed" : key + "-v");
  }
  // A restored instance keeps working and snapshots again.
  later->SetCurrentKey(changed);
  ListState<int64_t>(later.get(), "list").Add(3);
  KeyedStateRestore third = Checkpoint(*later, 3, "v1-s1-3");
  std::unique_ptr<KeyedStateBackend> again = Make(2, 1);
  ASSERT_TRUE(again->Restore({third}).ok());
  again->SetCurrentKey(changed);
  EXPECT_THAT(ListState<int64_t>(again.get(), "list").Get(), ElementsAre(1, 2, 3));
}

// Rescaling: the snapshots of 3 subtasks restored into 2 (and of 2 into 3)
// by key-group range; every key ends up exactly once, with all its state.
TEST_P(KeyedStateBackendTest, KeyGroupRangesMoveToAnotherParallelism) {
  const std::vector<std::string> keys = Keys(300);
  for (const auto& [from, to] : std::vector<std::pair<int, int>>{{3, 2}, {2, 3}}) {
    std::vector<KeyedStateRestore> parts;
    for (int subtask = 0; subtask < from; ++subtask) {
      std::unique_ptr<KeyedStateBackend> old = Make(from, subtask);
      Fill(*old, keys);
      parts.push_back(Checkpoint(*old, 1, absl::StrCat("from", from, "-s", subtask)));
    }
    int found = 0;
    for (int subtask = 0; subtask < to; ++subtask) {
      std::unique_ptr<KeyedStateBackend> next = Make(to, subtask);
      ASSERT_TRUE(next->Restore(parts).ok());
      for (const std::string& key : keys) {
        if (!next->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
        ExpectFilled(*next, key);
        ++found;
      }
    }
    EXPECT_EQ(found, static_cast<int>(keys.size())) << from << " -> " << to;
  }
}

// Timers (InternalTimerService) live in the keyed state: they fire in time
// order, at most once each, and come back after a restore — at the same
// parallelism and at another — with the key groups that hold them.
TEST_P(KeyedStateBackendTest, TimersFireInOrderAndAreRestoredAndRescaledWithTheirKeys) {
  Timed timed(Make(1, 0));
  std::unique_ptr<KeyedStateBackend>& backend = timed.backend;
  InternalTimerService& timers = timed.timers;
  OperatorStateBackend& operator_state = timed.operator_state;
  int64_t& element_time = timed.element_time;
  const std::vector<std::string> keys = Keys(40);
  for (size_t i = 0; i < keys.size(); ++i) {
    backend->SetCurrentKey(keys[i]);
    timers.Register(TimeDomain::kEventTime, 1000 + static_cast<int64_t>(i % 5) * 10, "w");
    timers.Register(TimeDomain::kEventTime, 1000 + static_cast<int64_t>(i % 5) * 10, "w");  // again: one timer
    timers.Register(TimeDomain::kProcessingTime, 5000, "");
  }
  backend->SetCurrentKey(keys[0]);
  timers.Register(TimeDomain::kEventTime, -7, "before 1970");
  timers.Delete(TimeDomain::kProcessingTime, 5000, "");
  EXPECT_EQ(timers.size(TimeDomain::kEventTime), keys.size() + 1);
  EXPECT_EQ(timers.size(TimeDomain::kProcessingTime), keys.size() - 1);
  EXPECT_EQ(timers.NextProcessingTime(), 5000);

  // Up to 1010: the timers at -7, 1000 and 1010, in time order, each with
  // its key current and its time as the element time; one registered while
  // firing at or before the watermark fires in the same pass.
  std::vector<std::pair<int64_t, std::string>> fired;
  timers.AdvanceWatermark(1010, [&](const FiredTimer& t) {
    EXPECT_EQ(t.domain, TimeDomain::kEventTime);
    EXPECT_EQ(backend->current_key(), t.key);
    EXPECT_EQ(element_time, t.time);
    fired.emplace_back(t.time, std::string(t.ns));
    if (t.time == -7) timers.Register(TimeDomain::kEventTime, 1005, "late");
  });
  EXPECT_EQ(element_time, kNoTimestamp) << "the element time is put back";
  EXPECT_EQ(timers.CurrentWatermark(), 1010);
  ASSERT_FALSE(fired.empty());
  EXPECT_EQ(fired.front(), std::make_pair(int64_t{-7}, std::string("before 1970")));
  EXPECT_TRUE(std::is_sorted(fired.begin(), fired.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; }));
  EXPECT_EQ(std::count(fired.begin(), fired.end(), std::make_pair(int64_t{1005}, std::string("late"))), 1);
  // 40 keys + the binary one spread over 5 times: keys i % 5 in {0, 1}.
  int64_t due = 0;
  for (size_t i = 0; i < keys.size(); ++i) due += i % 5 <= 1 ? 1 : 0;
  EXPECT_EQ(fired.size(), static_cast<size_t>(due) + 2);
  const size_t waiting = timers.size(TimeDomain::kEventTime);
  EXPECT_EQ(waiting, keys.size() - static_cast<size_t>(due));

  // A checkpoint now, restored at the same parallelism and at 3: every
  // waiting timer comes back exactly once, none that fired.
  timers.SnapshotState();
  const OperatorStateSnapshot floor = operator_state.Snapshot();
  const KeyedStateRestore part = Checkpoint(*backend, 1, "timers");
  for (int parallelism : {1, 3}) {
    std::multiset<std::pair<int64_t, std::string>> restored;
    size_t processing = 0;
    for (int subtask = 0; subtask < parallelism; ++subtask) {
      std::unique_ptr<KeyedStateBackend> next = Make(parallelism, subtask);
      ASSERT_TRUE(next->Restore({part}).ok());
      int64_t slot = kNoTimestamp;
      // The union list state gives every new subtask every old entry.
      OperatorStateBackend next_operator_state(floor);
      InternalTimerService again(next.get(), &next_operator_state, kMaxParallelism, &slot);
      again.Restore();
      // The lateness floor: the restored operator's event time does not go
      // back below what it had reached for these key groups.
      for (const std::string& key : keys) {
        if (!next->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
        next->SetCurrentKey(key);
        EXPECT_EQ(again.CurrentWatermark(), 1010) << key;
      }
      processing += again.size(TimeDomain::kProcessingTime);
      again.AdvanceWatermark(kMaxWatermark, [&](const FiredTimer& t) {
        EXPECT_TRUE(next->range().Contains(state::KeyGroupForKey(std::string(t.key), kMaxParallelism)));
        restored.emplace(t.time, std::string(t.key));
      });
      EXPECT_EQ(again.size(TimeDomain::kEventTime), 0u);
    }
    EXPECT_EQ(restored.size(), waiting) << "parallelism " << parallelism;
    EXPECT_EQ(processing, keys.size() - 1) << "parallelism " << parallelism;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i % 5 <= 1) continue;
      EXPECT_EQ(restored.count({1000 + static_cast<int64_t>(i % 5) * 10, keys[i]}), 1u) << keys[i];
    }
  }
}

// Pending entries (what a write-back cache hands over at a snapshot) leave
// the live state alone, go into that snapshot only, and are applied on top
// of the restored state by key group, at any parallelism.
TEST_P(KeyedStateBackendTest, PendingEntriesGoIntoTheNextSnapshotOnlyAndAreAppliedAtRestore) {
  const std::vector<std::string> keys = Keys(60);
  std::unique_ptr<KeyedStateBackend> backend = Make(1, 0);
  Fill(*backend, keys);  // map "map": a=1, b=2 under every key
  const std::string hundred = "100";
  const std::string fresh = "fresh";
  for (const std::string& key : keys) {
    backend->AddPendingEntry(key, "map", "a", &hundred);  // overwrites
    backend->AddPendingEntry(key, "map", "b", nullptr);   // removes
    backend->AddPendingEntry(key, "other", "c", &fresh);  // new state
  }
  // The live state does not change.
  ExpectFilled(*backend, keys[0]);
  EXPECT_FALSE(backend->GetEntry("other", "c").has_value());

  const KeyedStateRestore with = Checkpoint(*backend, 1, "with");
  EXPECT_FALSE(with.snapshot.pending_entries().empty());
  const KeyedStateRestore without = Checkpoint(*backend, 2, "without");
  EXPECT_TRUE(without.snapshot.pending_entries().empty()) << "handed over for one snapshot only";

  for (int parallelism : {1, 3}) {
    int found = 0;
    for (int subtask = 0; subtask < parallelism; ++subtask) {
      std::unique_ptr<KeyedStateBackend> next = Make(parallelism, subtask);
      ASSERT_TRUE(next->Restore({with}).ok());
      for (const std::string& key : keys) {
        if (!next->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) continue;
        ++found;
        next->SetCurrentKey(key);
        EXPECT_EQ(next->GetEntry("map", "a"), "100") << key;
        EXPECT_FALSE(next->GetEntry("map", "b").has_value()) << key;
        EXPECT_EQ(next->GetEntry("other", "c"), "fresh") << key;
        EXPECT_EQ(ValueState<std::string>(next.get(), "value").Get(), key + "-v") << "the rest as it was";
      }
    }
    EXPECT_EQ(found, static_cast<int>(keys.size())) << "parallelism " << parallelism;
  }
  std::unique_ptr<KeyedStateBackend> plain = Make(1, 0);
  ASSERT_TRUE(plain->Restore({without}).ok());
  ExpectFilled(*plain, keys[0]);

  // Damaged: the restore fails and says where.
  KeyedStateRestore damaged = with;
  damaged.snapshot.mutable_pending_entries()->resize(damaged.snapshot.pending_entries().size() - 3);
  std::unique_ptr<KeyedStateBackend> broken = Make(1, 0);
  const absl::Status status = broken->Restore({damaged});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("pending keyed-state entries are malformed"));
}

// A timer is handed over to the snapshots as a pending entry, and written
// into the backend after the second if it has not fired: every snapshot
// holds exactly the timers waiting when it was taken.
TEST_P(KeyedStateBackendTest, TimersReachTheBackendOnlyWhenTheyOutliveTwoSnapshots) {
  Timed timed(Make(1, 0));
  std::unique_ptr<KeyedStateBackend>& backend = timed.backend;
  InternalTimerService& timers = timed.timers;
  const std::vector<std::string> keys = Keys(20);
  auto restored_timers = [&](const KeyedStateRestore& part) {
    std::unique_ptr<KeyedStateBackend> next = Make(1, 0);
    EXPECT_TRUE(next->Restore({part}).ok());
    Timed again(std::move(next));
    std::multiset<int64_t> times;
    again.timers.AdvanceWatermark(kMaxWatermark, [&](const FiredTimer& t) { times.insert(t.time); });
    return times;
  };
  auto in_backend = [&] {
    size_t n = 0;
    backend->ForEachEntry(InternalTimerService::kEventTimers,
                          [&](std::string_view, std::string_view, std::string_view) { ++n; });
    return n;
  };
  auto checkpoint = [&](int64_t id) {
    timers.SnapshotState();
    KeyedStateRestore part = Checkpoint(*backend, id, absl::StrCat("chk-", id));
    timers.AfterSnapshot();
    return part;
  };
  for (const std::string& key : keys) {
    backend->SetCurrentKey(key);
    timers.Register(TimeDomain::kEventTime, 100, "");
    timers.Register(TimeDomain::kEventTime, 200, "");
    timers.Register(TimeDomain::kEventTime, 400, "");
  }
  const KeyedStateRestore first = checkpoint(1);  // all 60 handed over
  EXPECT_EQ(in_backend(), 0u);
  timers.AdvanceWatermark(100, [](const FiredTimer&) {});  // 20 fire, never written
  backend->SetCurrentKey(keys[0]);
  timers.Register(TimeDomain::kEventTime, 300, "");
  const KeyedStateRestore second = checkpoint(2);  // 41 handed over; then the 40 old ones written
  EXPECT_EQ(in_backend(), 2 * keys.size());
  timers.AdvanceWatermark(200, [](const FiredTimer&) {});  // 20 removed from the backend
  EXPECT_EQ(in_backend(), keys.size());
  const KeyedStateRestore third = checkpoint(3);  // 20 in the backend, 1 handed over (and then written)
  EXPECT_EQ(in_backend(), keys.size() + 1);
  timers.AdvanceWatermark(300, [](const FiredTimer&) {});
  backend->SetCurrentKey(keys[0]);
  timers.Register(TimeDomain::kEventTime, 450, "");
  checkpoint(4);
  timers.SnapshotState();  // without AfterSnapshot: the next snapshot catches up
  Checkpoint(*backend, 5, "chk-5");
  EXPECT_EQ(in_backend(), keys.size());
  const KeyedStateRestore sixth = checkpoint(6);
  EXPECT_EQ(in_backend(), keys.size() + 1);

  std::multiset<int64_t> expected_first, expected_second{300};
  for (size_t i = 0; i < keys.size(); ++i) {
    expected_first.insert({100, 200, 400});
    expected_second.insert({200, 400});
  }
  EXPECT_EQ(restored_timers(first), expected_first);
  EXPECT_EQ(restored_timers(second), expected_second);
  std::multiset<int64_t> expected_third{300}, expected_sixth{450};
  for (size_t i = 0; i < keys.size(); ++i) {
    expected_third.insert(400);
    expected_sixth.insert(400);
  }
  EXPECT_EQ(restored_timers(third), expected_third);
  EXPECT_EQ(restored_timers(sixth), expected_sixth);
}

// A timer goes into the backend only after it was handed over to
// `snapshots_before_write` snapshots, and every one of them holds it.
TEST_P(KeyedStateBackendTest, TimersAreWrittenAfterTheirNumberOfSnapshots) {
  constexpr int kSnapshots = 4;
  Timed timed(Make(1, 0), kSnapshots);
  const std::vector<std::string> keys = Keys(5);
  for (const std::string& key : keys) {
    timed.backend->SetCurrentKey(key);
    timed.timers.Register(TimeDomain::kEventTime, 1000, "");
  }
  auto in_backend = [&] {
    size_t n = 0;
    timed.backend->ForEachEntry(InternalTimerService::kEventTimers,
                                [&](std::string_view, std::string_view, std::string_view) { ++n; });
    return n;
  };
  for (int id = 1; id <= kSnapshots; ++id) {
    EXPECT_EQ(in_backend(), 0u) << "before snapshot " << id;
    timed.timers.SnapshotState();
    KeyedStateRestore part = Checkpoint(*timed.backend, id, absl::StrCat("chk-", id));
    EXPECT_EQ(timed.timers.AfterSnapshot(), id == kSnapshots ? keys.size() : 0u);
    // Each snapshot restores all of them.
    std::unique_ptr<KeyedStateBackend> next = Make(1, 0);
    ASSERT_TRUE(next->Restore({part}).ok());
    Timed again(std::move(next));
    size_t fired = 0;
    again.timers.AdvanceWatermark(kMaxWatermark, [&](const FiredTimer& t) {
      EXPECT_EQ(t.time, 1000);
      ++fired;
    });
    EXPECT_EQ(fired, keys.size()) << "restored from snapshot " << id;
  }
  EXPECT_EQ(in_backend(), keys.size());
  size_t fired = 0;
  timed.timers.AdvanceWatermark(1000, [&](const FiredTimer&) { ++fired; });
  EXPECT_EQ(fired, keys.size());
  EXPECT_EQ(in_backend(), 0u);
}

TEST(TimerEncodingTest, ByteOrderIsTimeOrder) {
  const std::vector<int64_t> times = {kMinWatermark, -1000, -1, 0, 1, 255, 256, 1700000000000, kMaxWatermark};
  for (size_t i = 0; i + 1 < times.size(); ++i) {
    EXPECT_LT(EncodeTimer(times[i], "z"), EncodeTimer(times[i + 1], "a")) << times[i];
  }
  int64_t time = 0;
  std::string_view ns;
  ASSERT_TRUE(DecodeTimer(EncodeTimer(-42, "window"), &time, &ns));
  EXPECT_EQ(time, -42);
  EXPECT_EQ(ns, "window");
  EXPECT_FALSE(DecodeTimer("short", &time, &ns));
}

TEST_P(KeyedStateBackendTest, RefusesKeysOfAnotherSubtask) {
  std::unique_ptr<KeyedStateBackend> backend = Make(2, 0);
  std::string foreign;
  for (int i = 0; foreign.empty(); ++i) {
    std::string key = absl::StrCat("k", i);
    if (!backend->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) foreign = key;
  }
  EXPECT_THROW(backend->SetCurrentKey(foreign), std::logic_error);
}

TEST_P(KeyedStateBackendTest, RefusesTheOtherBackendsSnapshot) {
  KeyedStateRestore other;
  other.checkpoint_dir = (root_ / "checkpoint").string();
  if (GetParam() == "hashmap") {
    other.snapshot.mutable_keyed_files()->set_backend("rocksdb");
  } else {
    v1::KeyGroupSnapshotProto* group = other.snapshot.add_key_groups();
    group->set_key_group(0);
    group->set_data("v");
  }
  absl::Status status = Make(1, 0)->Restore({other});
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("state.backend.type"));
}

// Incremental snapshots (rocksdb): the second snapshot, after few updates,
// uploads a small part of the state and refers to the rest in the shared
// directory; a restore from it brings back everything, also at another
// parallelism.
TEST_P(KeyedStateBackendTest, IncrementalSnapshotsUploadOnlyNewFiles) {
  if (GetParam() != "rocksdb") GTEST_SKIP() << "only the rocksdb backend snapshots incrementally";
  std::unique_ptr<RocksDbKeyedState> opened = OpenIncremental();
  RocksDbKeyedState& backend = *opened;
  const std::vector<std::string> keys = Keys(20000);
  Fill(backend, keys);
  backend.FlushForTesting();  // the state in SST files, the log empty

  const Written first = CheckpointIncrementally(backend, 1);
  EXPECT_EQ(first.reused, 0);
  EXPECT_GT(first.written, 100000);
  backend.NotifyCheckpointComplete(1);
  for (int i = 0; i < 50; ++i) {  // a few updates
    backend.SetCurrentKey(keys[i]);
    ValueState<std::string>(&backend, "value").Set(keys[i] + "-v");
  }
  const Written second = CheckpointIncrementally(backend, 2);
  EXPECT_GT(second.reused, 0);
  EXPECT_LT(second.written * 10, first.written) << "written " << second.written << " of " << first.written;

  // A restore from the second: every key, at the same and another range.
  for (int parallelism : {1, 2}) {
    std::unique_ptr<KeyedStateBackend> restored = Make(parallelism, 0);
    ASSERT_TRUE(restored->Restore({second.restore}).ok());
    for (const std::string& key : keys) {
      if (restored->range().Contains(state::KeyGroupForKey(key, kMaxParallelism))) ExpectFilled(*restored, key);
    }
  }
}

// An aborted checkpoint forgets only what it uploaded itself. The JobManager
// discards its directory and, once no complete checkpoint refers to them,
// the shared files it uploaded first; what the completed checkpoint before
// it holds stays. So the next checkpoint refers to the completed one's files
// again, and uploads the aborted one's files anew.
TEST_P(KeyedStateBackendTest, AnAbortedCheckpointForgetsOnlyWhatItUploaded) {
  if (GetParam() != "rocksdb") GTEST_SKIP() << "only the rocksdb backend snapshots incrementally";
  std::unique_ptr<RocksDbKeyedState> opened = OpenIncremental();
  RocksDbKeyedState& backend = *opened;
  const std::vector<std::string> keys = Keys(20000);
  Fill(backend, keys);
  backend.FlushForTesting();
  const Written first = CheckpointIncrementally(backend, 1);
  backend.NotifyCheckpointComplete(1);
  for (int i = 0; i < 50; ++i) {
    backend.SetCurrentKey(keys[i]);
    ValueState<std::string>(&backend, "value").Set(keys[i] + "-v");
  }
  backend.FlushForTesting();  // a new SST file, first uploaded by checkpoint 2
  const Written second = CheckpointIncrementally(backend, 2);
  ASSERT_FALSE(second.uploaded_shared.empty());

  backend.NotifyCheckpointAborted(2);
  // What the JobManager does with it: its directory goes, and so do the
  // shared files only it refers to.
  fs::remove_all(second.restore.checkpoint_dir);
  for (const std::string& name : second.uploaded_shared) fs::remove(root_ / "job" / "shared" / name);

  const Written third = CheckpointIncrementally(backend, 3);
  EXPECT_EQ(third.reused, first.written_shared) << "the files checkpoint 1 holds are uploaded again";
  for (const std::string& name : second.uploaded_shared) {
    // Uploaded again, under checkpoint 3's id: a shared name starts with the
    // id of the checkpoint that uploaded it.
    ASSERT_TRUE(absl::StartsWith(name, "c2-")) << name;
    EXPECT_THAT(third.uploaded_shared, ::testing::Contains(absl::StrCat("c3-", name.substr(3))))
        << "checkpoint 2's file is uploaded again";
  }
  std::unique_ptr<KeyedStateBackend> restored = Make(1, 0);
  absl::Status status = restored->Restore({third.restore});
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& key : keys) ExpectFilled(*restored, key);
}

INSTANTIATE_TEST_SUITE_P(Backends, KeyedStateBackendTest, ::testing::Values("rocksdb", "hashmap"),
                         [](const auto& info) { return info.param; });

// RocksDB snapshots are files: damaged or missing ones fail the restore with
// kDataLoss naming the file, never a crash or silently empty state.
class RocksDbSnapshotFilesTest : public KeyedStateBackendTest {};

TEST_P(RocksDbSnapshotFilesTest, DamagedFilesFailTheRestore) {
  std::unique_ptr<KeyedStateBackend> original = Make(1, 0);
  Fill(*original, Keys(2000));
  static_cast<RocksDbKeyedState&>(*original).FlushForTesting();
  KeyedStateRestore good = Checkpoint(*original, 1, "v1-s0");
  const fs::path dir = fs::path(good.checkpoint_dir) / good.snapshot.keyed_files().directory();
  std::string sst;
  for (const v1::StateFileProto& file : good.snapshot.keyed_files().files()) {
    if (absl::EndsWith(file.name(), ".sst")) sst = file.name();
  }
  ASSERT_FALSE(sst.empty()) << "a snapshot of 2000 keys holds SST files";

  // Same size, one byte flipped in the middle of the data.
  {
    std::fstream f(dir / sst, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(64);
    char c = 0;
    f.read(&c, 1);
    f.seekp(64);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  absl::Status flipped = Make(1, 0)->Restore({good});
  EXPECT_EQ(flipped.code(), absl::StatusCode::kDataLoss) << flipped;

  // Truncated.
  fs::resize_file(dir / sst, 10);
  absl::Status truncated = Make(1, 0)->Restore({good});
  EXPECT_EQ(truncated.code(), absl::StatusCode::kDataLoss) << truncated;
  EXPECT_THAT(std::string(truncated.message()), ::testing::HasSubstr(sst));

  // Missing.
  fs::remove(dir / sst);
  absl::Status missing = Make(1, 0)->Restore({good});
  EXPECT_EQ(missing.code(), absl::StatusCode::kDataLoss) << missing;

  // A file name that leaves the directory.
  KeyedStateRestore escaping = good;
  escaping.snapshot.mutable_keyed_files()->mutable_files(0)->set_name("../../etc/passwd");
  absl::Status escaped = Make(1, 0)->Restore({escaping});
  EXPECT_EQ(escaped.code(), absl::StatusCode::kDataLoss) << escaped;
}

// The snapshot's synchronous part does not flush: what the memtables hold
// leaves in a copy of the write-ahead log, and a damaged log fails the
// restore like a damaged table file (never a restore that stops at the
// damage). The flush happens afterwards in RocksDB's own threads, so the
// next snapshot's log holds only what came since.
TEST_P(RocksDbSnapshotFilesTest, SnapshotsCarryTheLogAndFlushInTheBackground) {
  const state::KeyGroupRange range = state::KeyGroupRangeForSubtask(kMaxParallelism, 1, 0);
  RocksDbStateOptions options;
  options.instance_dir = (root_ / "instance").string();
  options.write_buffer_bytes = 64 << 20;  // no flush of its own while filling
  auto opened = RocksDbKeyedState::Open(range, kMaxParallelism, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  RocksDbKeyedState& backend = **opened;
  const std::vector<std::string> keys = Keys(20000);
  Fill(backend, keys);

  auto sizes = [](const KeyedStateRestore& restore, int64_t* log, int64_t* tables) {
    *log = *tables = 0;
    for (const v1::StateFileProto& file : restore.snapshot.keyed_files().files()) {
      if (absl::EndsWith(file.name(), ".log")) *log += file.size_bytes();
      if (absl::EndsWith(file.name(), ".sst")) *tables += file.size_bytes();
    }
  };
  const KeyedStateRestore first = Checkpoint(backend, 1, "v1-s0");
  int64_t first_log = 0, first_tables = 0;
  sizes(first, &first_log, &first_tables);
  EXPECT_EQ(first_tables, 0) << "the synchronous part flushed the memtables";
  EXPECT_GT(first_log, 100000);
  std::unique_ptr<KeyedStateBackend> restored = Make(1, 0);
  absl::Status status = restored->Restore({first});
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& key : keys) ExpectFilled(*restored, key);
  restored.reset();

  // The background flush writes the memtables out (a deadline, not a
  // measurement: it takes milliseconds).
  const fs::path db = fs::path(options.instance_dir) / "db";
  auto has_tables = [&] {
    for (const auto& entry : fs::directory_iterator(db)) {
      if (entry.path().extension() == ".sst") return true;
    }
    return false;
  };
  for (int i = 0; i < 600 && !has_tables(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(has_tables()) << "no memtable flush after the snapshot";
  backend.SetCurrentKey(keys[0]);
  ValueState<std::string>(&backend, "value").Set("later");
  KeyedStateRestore second;
  // The flush may still be installing its files: the log of the memtable it
  // writes stays live until then, so poll until the snapshot is the small one.
  int64_t second_log = 0, second_tables = 0;
  for (int i = 0; i < 600; ++i) {
    second = Checkpoint(backend, 2 + i, absl::StrCat("v1-s0-", 2 + i));
    sizes(second, &second_log, &second_tables);
    if (second_tables > 0 && second_log * 10 < first_log) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GT(second_tables, 0);
  EXPECT_LT(second_log * 10, first_log) << second_log << " against " << first_log;
  restored = Make(1, 0);
  status = restored->Restore({second});
  ASSERT_TRUE(status.ok()) << status;
  restored->SetCurrentKey(keys[0]);
  EXPECT_EQ(ValueState<std::string>(restored.get(), "value").Get(), "later");
  restored->SetCurrentKey(keys[1]);
  EXPECT_EQ(ValueState<std::string>(restored.get(), "value").Get(), keys[1] + "-v");
  restored.reset();

  // Files RocksDB goes on appending to after the synchronous part (here
  // MANIFEST, which the flush's new file is recorded in; the newest log,
  // when no memtable switch came between) are copied only up to their size
  // at the snapshot: a restore sees the state as it was then.
  backend.SetCurrentKey(keys[2]);
  ValueState<std::string>(&backend, "value").Set("before");
  auto pending = backend.Snapshot(1000);
  ASSERT_TRUE(pending.ok()) << pending.status();
  ValueState<std::string>(&backend, "value").Set("after");
  backend.FlushForTesting();
  KeyedStateRestore third;
  third.checkpoint_dir = (root_ / "checkpoint").string();
  ASSERT_TRUE((*pending)->Write(third.checkpoint_dir, "v1-s0-1000", &third.snapshot).ok());
  restored = Make(1, 0);
  status = restored->Restore({third});
  ASSERT_TRUE(status.ok()) << status;
  restored->SetCurrentKey(keys[2]);
  EXPECT_EQ(ValueState<std::string>(restored.get(), "value").Get(), "before");
  restored.reset();

  // One byte of the first snapshot's log flipped.
  std::string log;
  for (const v1::StateFileProto& file : first.snapshot.keyed_files().files()) {
    if (absl::EndsWith(file.name(), ".log")) log = file.name();
  }
  const fs::path log_path = fs::path(first.checkpoint_dir) / first.snapshot.keyed_files().directory() / log;
  {
    std::fstream f(log_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(first_log / 2);
    char c = 0;
    f.read(&c, 1);
    f.seekp(first_log / 2);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  status = Make(1, 0)->Restore({first});
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(std::string(status.message()), ::testing::HasSubstr("Corruption")) << status;
}

// A job without checkpoints keeps no log; a snapshot of such an instance
// (none is expected) flushes first and is still whole.
TEST_P(RocksDbSnapshotFilesTest, WithoutTheLogASnapshotFlushesFirst) {
  RocksDbStateOptions options;
  options.instance_dir = (root_ / "no-log").string();
  options.write_ahead_log = false;
  auto opened =
      RocksDbKeyedState::Open(state::KeyGroupRangeForSubtask(kMaxParallelism, 1, 0), kMaxParallelism, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::vector<std::string> keys = Keys(3000);
  Fill(**opened, keys);
  const KeyedStateRestore restore = Checkpoint(**opened, 1, "v1-s0");
  int64_t log = 0, tables = 0;
  for (const v1::StateFileProto& file : restore.snapshot.keyed_files().files()) {
    if (absl::EndsWith(file.name(), ".log")) log += file.size_bytes();
    if (absl::EndsWith(file.name(), ".sst")) tables += file.size_bytes();
  }
  EXPECT_EQ(log, 0);
  EXPECT_GT(tables, 0);
  std::unique_ptr<KeyedStateBackend> restored = Make(1, 0);
  absl::Status status = restored->Restore({restore});
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& key : keys) ExpectFilled(*restored, key);
}

INSTANTIATE_TEST_SUITE_P(RocksDb, RocksDbSnapshotFilesTest, ::testing::Values("rocksdb"),
                         [](const auto& info) { return info.param; });

// Local recovery: after its upload a snapshot stays in the local recovery
// directory; a new instance of the same key-group range restores checkpoint
// n from it without reading the checkpoint directory (which is gone here, so
// only the local copy can succeed). Completed checkpoints prune older local
// copies, aborted ones their own, and a local copy that does not match the
// checkpoint is passed over for the checkpoint directory.
TEST_P(RocksDbSnapshotFilesTest, LocalRecoveryRestoresFromTheTaskManagersDisk) {
  const state::KeyGroupRange range = state::KeyGroupRangeForSubtask(kMaxParallelism, 1, 0);
  const std::string kept = (root_ / "local-recovery" / "v1-kg0-128").string();
  auto open = [&](const std::string& instance) {
    RocksDbStateOptions options;
    options.instance_dir = (root_ / instance).string();
    options.write_buffer_bytes = 1 << 20;
    options.incremental = true;
    options.local_recovery_dir = kept;
    auto backend = RocksDbKeyedState::Open(range, kMaxParallelism, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return std::move(*backend);
  };
  const std::vector<std::string> keys = Keys(3000);
  std::unique_ptr<RocksDbKeyedState> original = open("first");
  Fill(*original, keys);
  original->FlushForTesting();
  auto checkpoint = [&](int64_t id) {
    KeyedStateRestore restore;
    restore.checkpoint_dir = (root_ / "job" / absl::StrCat("chk-", id)).string();
    fs::create_directories(restore.checkpoint_dir);
    auto snapshot = original->Snapshot(id);
    EXPECT_TRUE(snapshot.ok()) << snapshot.status();
    absl::Status written = (*snapshot)->Write(restore.checkpoint_dir, "v1-s0", &restore.snapshot);
    EXPECT_TRUE(written.ok()) << written;
    return restore;
  };
  const KeyedStateRestore first = checkpoint(1);
  EXPECT_TRUE(fs::is_directory(fs::path(kept) / "chk-1"));
  original->NotifyCheckpointComplete(1);
  const KeyedStateRestore second = checkpoint(2);
  // RocksDB appends to the MANIFEST the snapshot linked (the flush records
  // its file); the local copy keeps only what the checkpoint recorded.
  original->SetCurrentKey(keys[0]);
  ValueState<std::string>(original.get(), "value").Set("after");
  original->FlushForTesting();
  original->NotifyCheckpointComplete(2);
  EXPECT_FALSE(fs::exists(fs::path(kept) / "chk-1")) << "a completed checkpoint prunes older local copies";
  const KeyedStateRestore third = checkpoint(3);
  original->NotifyCheckpointAborted(3);
  EXPECT_FALSE(fs::exists(fs::path(kept) / "chk-3")) << "an aborted checkpoint's local copy goes";
  original.reset();  // the task ends; its instance directory goes, the local copy stays

  // Nothing of checkpoint 2 left but the local copy.
  fs::remove_all(root_ / "job");
  std::unique_ptr<RocksDbKeyedState> restored = open("second");
  absl::Status status = restored->Restore({second});
  ASSERT_TRUE(status.ok()) << status;
  for (const std::string& key : keys) ExpectFilled(*restored, key);
  restored.reset();

  // A local copy that differs from what the checkpoint recorded is not used:
  // the restore reads the checkpoint directory (gone, so it fails).
  std::string sst;
  for (const v1::StateFileProto& file : second.snapshot.keyed_files().files()) {
    if (absl::EndsWith(file.name(), ".sst")) sst = file.name();
  }
  ASSERT_FALSE(sst.empty());
  fs::resize_file(fs::path(kept) / "chk-2" / sst, 10);
  absl::Status mismatched = open("third")->Restore({second});
  EXPECT_EQ(mismatched.code(), absl::StatusCode::kDataLoss) << mismatched;
}

}  // namespace
}  // namespace weir::taskmanager
