#include "taskmanager/network/result_partition.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::taskmanager::network {
namespace {

using weir::testing::WaitFor;

// Failure guard for waits on conditions that must come true.
constexpr absl::Duration kGuard = absl::Seconds(30);

Buffer DataBuffer(const std::string& record) {
  Buffer buffer;
  AppendRecord(record, &buffer);
  return buffer;
}

std::string OnlyRecord(const Buffer& buffer) {
  std::string record;
  EXPECT_TRUE(ForEachRecord(buffer, [&record](absl::string_view bytes) { record = std::string(bytes); }).ok());
  return record;
}

TEST(ResultPartitionTest, AddBlocksWhileFullAndResumesWhenPolled) {
  ResultPartition partition("p", /*num_subpartitions=*/2, /*capacity=*/2);
  ASSERT_TRUE(partition.Add(0, DataBuffer("a")));
  ASSERT_TRUE(partition.Add(0, DataBuffer("b")));
  EXPECT_FALSE(partition.backpressured());
  EXPECT_EQ(partition.backpressured_time(), absl::ZeroDuration());
  // The other subpartition is independent of the full one.
  ASSERT_TRUE(partition.Add(1, DataBuffer("x")));

  std::atomic<bool> added{false};
  std::thread producer([&] {
    EXPECT_TRUE(partition.Add(0, DataBuffer("c")));
    added = true;
  });
  ASSERT_TRUE(WaitFor([&] { return partition.backpressured(); }, kGuard));
  EXPECT_FALSE(added);
  EXPECT_EQ(partition.buffered(0), 2);
  // The wait in progress counts.
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_GE(partition.backpressured_time(), absl::Milliseconds(30));

  std::optional<Buffer> first = partition.Poll(0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(OnlyRecord(*first), "a");
  producer.join();
  EXPECT_TRUE(added);
  EXPECT_FALSE(partition.backpressured());
  // Once the wait ended, the total stands still.
  const absl::Duration total = partition.backpressured_time();
  EXPECT_GE(total, absl::Milliseconds(30));
  absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(partition.backpressured_time(), total);
  EXPECT_EQ(OnlyRecord(*partition.Poll(0)), "b");
  EXPECT_EQ(OnlyRecord(*partition.Poll(0)), "c");
  EXPECT_FALSE(partition.Poll(0).has_value());
  EXPECT_EQ(OnlyRecord(*partition.Poll(1)), "x");
}

// What a checkpoint barrier needs: an Add over capacity never waits, and
// AdmitOverCapacity lets a blocked producer go on until it is cleared.
TEST(ResultPartitionTest, OverCapacityAddsDoNotWaitAndAdmittingWakesABlockedProducer) {
  ResultPartition partition("p", /*num_subpartitions=*/1, /*capacity=*/1);
  ASSERT_TRUE(partition.Add(0, DataBuffer("a")));
  ASSERT_TRUE(partition.Add(0, DataBuffer("barrier"), /*over_capacity=*/true));
  EXPECT_EQ(partition.buffered(0), 2);
  EXPECT_FALSE(partition.backpressured());

  std::atomic<int> added{0};
  std::thread producer([&] {
    EXPECT_TRUE(partition.Add(0, DataBuffer("b")));
    added = 1;
    EXPECT_TRUE(partition.Add(0, DataBuffer("c")));
    added = 2;
  });
  ASSERT_TRUE(WaitFor([&] { return partition.backpressured(); }, kGuard));
  EXPECT_EQ(added, 0);
  partition.AdmitOverCapacity(true);
  producer.join();
  EXPECT_EQ(added, 2);
  EXPECT_EQ(partition.buffered(0), 4);

  // Cleared, a full subpartition blocks again, until polled below capacity.
  partition.AdmitOverCapacity(false);
  std::thread blocked([&] { EXPECT_TRUE(partition.Add(0, DataBuffer("d"))); });
  ASSERT_TRUE(WaitFor([&] { return partition.backpressured(); }, kGuard));
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) order.push_back(OnlyRecord(*partition.Poll(0)));
  blocked.join();
  order.push_back(OnlyRecord(*partition.Poll(0)));
  EXPECT_EQ(order, (std::vector<std::string>{"a", "barrier", "b", "c", "d"}));
}

TEST(ResultPartitionTest, ReleaseWakesABlockedProducer) {
  ResultPartition partition("p", 1, 1);
  ASSERT_TRUE(partition.Add(0, DataBuffer("a")));
  std::atomic<int> result{-1};
  std::thread producer([&] { result = partition.Add(0, DataBuffer("b")) ? 1 : 0; });
  ASSERT_TRUE(WaitFor([&] { return partition.backpressured(); }, kGuard));
  partition.Release();
  producer.join();
  EXPECT_EQ(result, 0);
  EXPECT_TRUE(partition.released());
  EXPECT_FALSE(partition.Add(0, DataBuffer("c")));
  EXPECT_FALSE(partition.Poll(0).has_value());
  EXPECT_EQ(partition.buffered(0), 0);
  partition.Release();  // idempotent
}

TEST(ResultPartitionTest, ListenerFiresWhenASubpartitionTurnsNonEmptyAndOnRelease) {
  ResultPartition partition("p", 2, 4);
  std::atomic<int> calls{0};
  ASSERT_TRUE(partition.AttachConsumer(0, [&calls] { ++calls; }).ok());

  ASSERT_TRUE(partition.Add(0, DataBuffer("a")));
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(partition.Add(0, DataBuffer("b")));
  EXPECT_EQ(calls, 1) << "only the empty -> non-empty transition notifies";
  ASSERT_TRUE(partition.Add(1, DataBuffer("x")));
  EXPECT_EQ(calls, 1) << "another subpartition's buffers do not notify this consumer";
  ASSERT_TRUE(partition.Poll(0).has_value());
  ASSERT_TRUE(partition.Poll(0).has_value());
  ASSERT_TRUE(partition.Add(0, DataBuffer("c")));
  EXPECT_EQ(calls, 2);

  partition.Release();
  EXPECT_EQ(calls, 3);
}

TEST(ResultPartitionTest, OneConsumerPerSubpartition) {
  ResultPartition partition("p", 2);
  ASSERT_TRUE(partition.AttachConsumer(0, [] {}).ok());
  absl::Status second = partition.AttachConsumer(0, [] {});
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_TRUE(partition.AttachConsumer(1, [] {}).ok());
  partition.DetachConsumer(0);
  EXPECT_TRUE(partition.AttachConsumer(0, [] {}).ok());
}

TEST(PartitionManagerTest, RegistersLooksUpAndUnregisters) {
  PartitionManager manager;
  auto partition = std::make_shared<ResultPartition>("job/map/0", 2);
  ASSERT_TRUE(manager.Register(partition).ok());
  EXPECT_EQ(manager.Lookup("job/map/0"), partition);
  EXPECT_EQ(manager.Lookup("job/map/1"), nullptr);
  absl::Status duplicate = manager.Register(std::make_shared<ResultPartition>("job/map/0", 2));
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kAlreadyExists) << duplicate;
  EXPECT_EQ(manager.size(), 1u);

  EXPECT_EQ(manager.Unregister("job/map/0"), partition);
  EXPECT_FALSE(partition->released()) << "unregistering does not release";
  EXPECT_EQ(manager.Lookup("job/map/0"), nullptr);
  EXPECT_EQ(manager.Unregister("job/map/0"), nullptr);
}

TEST(PartitionManagerTest, WaitForGivesUpAtTheDeadline) {
  PartitionManager manager;
  auto result = manager.WaitFor("never", absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "never")) << result.status();
}

TEST(PartitionManagerTest, WaitForReturnsOnceAnotherThreadRegisters) {
  PartitionManager manager;
  auto partition = std::make_shared<ResultPartition>("late", 1);
  std::thread waiter([&] {
    auto result = manager.WaitFor("late", absl::Now() + kGuard);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(*result, partition);
  });
  ASSERT_TRUE(manager.Register(partition).ok());
  waiter.join();
}

TEST(PartitionManagerTest, RegistrationListenersFireOnceForTheirId) {
  PartitionManager manager;
  int a_calls = 0;
  int removed_calls = 0;
  manager.AddRegistrationListener("a", [&a_calls] { ++a_calls; });
  PartitionManager::ListenerId removed = manager.AddRegistrationListener("a", [&removed_calls] { ++removed_calls; });
  manager.RemoveRegistrationListener(removed);

  ASSERT_TRUE(manager.Register(std::make_shared<ResultPartition>("b", 1)).ok());
  EXPECT_EQ(a_calls, 0);
  ASSERT_TRUE(manager.Register(std::make_shared<ResultPartition>("a", 1)).ok());
  EXPECT_EQ(a_calls, 1);
  manager.Unregister("a");
  ASSERT_TRUE(manager.Register(std::make_shared<ResultPartition>("a", 1)).ok());
  EXPECT_EQ(a_calls, 1) << "a listener fires once";
  EXPECT_EQ(removed_calls, 0);
}

}  // namespace
}  // namespace weir::taskmanager::network
