#include "jobmanager/resource_manager.h"

#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/simulated_clock.h"

namespace weir::jobmanager {
namespace {

using ::testing::HasSubstr;

class FakeSession final : public MembershipSession {
 public:
  void Close() override { closed_ = true; }
  bool Send(const v1::JobManagerMessage&) override { return !closed_; }
  bool closed() const { return closed_; }

 private:
  std::atomic<bool> closed_{false};
};

std::shared_ptr<FakeSession> NewSession() { return std::make_shared<FakeSession>(); }

v1::RegisterTaskManager Registration(const std::string& id, int64_t slots) {
  v1::RegisterTaskManager request;
  request.mutable_info()->set_taskmanager_id(id);
  request.mutable_info()->set_address("127.0.0.1:1");
  request.mutable_info()->set_slots_total(static_cast<int32_t>(slots));
  return request;
}

TEST(ResourceManagerTest, RefusesAbsurdSlotCountsAndStoresNothing) {
  ResourceManager rm(absl::Seconds(30), "jm-test");
  auto session = NewSession();
  for (int64_t slots : {int64_t{std::numeric_limits<int32_t>::max()}, int64_t{1025}, int64_t{0}, int64_t{-3}}) {
    absl::StatusOr<uint64_t> epoch = rm.Register(Registration("tm-1", slots), session);
    EXPECT_EQ(epoch.status().code(), absl::StatusCode::kInvalidArgument) << slots;
    EXPECT_THAT(epoch.status().message(), HasSubstr("taskmanager.numberOfTaskSlots"));
  }
  EXPECT_TRUE(rm.List().empty());
}

TEST(ResourceManagerTest, RefusesOversizedStringsAndSlotReports) {
  ResourceManager rm(absl::Seconds(30), "jm-test");
  auto session = NewSession();
  EXPECT_EQ(rm.Register(Registration(std::string(100000, 'x'), 1), session).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::RegisterTaskManager long_address = Registration("tm-1", 1);
  long_address.mutable_info()->set_address(std::string(100000, 'a'));
  EXPECT_EQ(rm.Register(long_address, session).status().code(), absl::StatusCode::kInvalidArgument);
  v1::RegisterTaskManager big_report = Registration("tm-1", 1);
  for (int i = 0; i < 5000; ++i) big_report.mutable_slots()->add_slots()->set_index(i);
  EXPECT_EQ(rm.Register(big_report, session).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rm.List().empty());

  absl::StatusOr<uint64_t> epoch = rm.Register(Registration("tm-1", 4), session);
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  EXPECT_EQ(rm.Heartbeat("tm-1", *epoch, big_report.slots()).code(), absl::StatusCode::kInvalidArgument);
}

// The crash the bound prevents: a refused registration must leave nothing the
// expiry loop could trip over, and the loop must go on expiring real members.
TEST(ResourceManagerTest, ExpiryAfterARefusedRegistrationStillWorks) {
  ResourceManager rm(absl::Milliseconds(100), "jm-test");
  absl::Notification lost;
  std::string lost_id;
  rm.AddLossListener([&](const v1::TaskManagerInfo& info, LossReason reason) {
    if (reason == LossReason::kHeartbeatTimeout && !lost.HasBeenNotified()) {
      lost_id = info.taskmanager_id();
      lost.Notify();
    }
  });
  rm.Start();
  auto bad = NewSession();
  auto good = NewSession();
  EXPECT_FALSE(rm.Register(Registration("tm-bad", std::numeric_limits<int32_t>::max()), bad).ok());
  ASSERT_TRUE(rm.Register(Registration("tm-good", 2), good).ok());
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(lost_id, "tm-good");
  EXPECT_TRUE(good->closed());
  EXPECT_FALSE(bad->closed());
  EXPECT_TRUE(rm.List().empty());
  rm.Stop();
}

// heartbeat.timeout goes by the ResourceManager's clock: a TaskManager is
// declared lost once the clock has passed its last heartbeat by more than the
// timeout, and not at the timeout itself; a heartbeat starts its silence over.
TEST(ResourceManagerTest, AHeartbeatTimeoutIsDeclaredOnlyWhenTheClockPassesIt) {
  time::SimulatedClock clock;
  ResourceManager rm(absl::Seconds(10), "jm-test", &clock);
  absl::Mutex mu;
  std::vector<std::string> lost;
  rm.AddLossListener([&](const v1::TaskManagerInfo& info, LossReason reason) {
    EXPECT_EQ(reason, LossReason::kHeartbeatTimeout);
    absl::MutexLock lock(&mu);
    lost.push_back(info.taskmanager_id());
  });
  auto lost_so_far = [&] {
    absl::MutexLock lock(&mu);
    return lost;
  };
  auto await_lost = [&](size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [&] { return lost.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));
  };
  rm.Start();
  auto session1 = NewSession();
  auto session2 = NewSession();
  ASSERT_TRUE(rm.Register(Registration("tm-1", 1), session1).ok());
  absl::StatusOr<uint64_t> epoch2 = rm.Register(Registration("tm-2", 1), session2);
  ASSERT_TRUE(epoch2.ok());
  ASSERT_TRUE(clock.WaitUntilParked(1, absl::Seconds(60)));

  clock.Advance(absl::Seconds(8));
  ASSERT_TRUE(rm.Heartbeat("tm-2", *epoch2, v1::SlotReport()).ok());
  clock.Advance(absl::Seconds(2));  // tm-1 silent for exactly the timeout
  // The expiry loop woke, looked, and waits again: nobody lost.
  ASSERT_TRUE(clock.WaitUntilParked(1, absl::Seconds(60)));
  EXPECT_TRUE(lost_so_far().empty());
  EXPECT_EQ(rm.List().size(), 2u);

  clock.Advance(absl::Seconds(1));  // tm-1: 11 s; tm-2: 3 s
  ASSERT_TRUE(await_lost(1));
  EXPECT_EQ(lost_so_far(), std::vector<std::string>{"tm-1"});
  EXPECT_TRUE(session1->closed());
  EXPECT_FALSE(session2->closed());
  ASSERT_EQ(rm.List().size(), 1u);
  EXPECT_EQ(rm.List()[0].info.taskmanager_id(), "tm-2");

  clock.Advance(absl::Seconds(7));  // tm-2: 10 s
  ASSERT_TRUE(clock.WaitUntilParked(1, absl::Seconds(60)));
  EXPECT_EQ(lost_so_far().size(), 1u);
  clock.Advance(absl::Seconds(1));
  ASSERT_TRUE(await_lost(2));
  EXPECT_EQ(lost_so_far(), (std::vector<std::string>{"tm-1", "tm-2"}));
  rm.Stop();
}

// Slots spread over the TaskManagers (most free first); with local recovery,
// slot i goes back to the TaskManager that held it when that one has room,
// and the rest spread as usual.
TEST(ResourceManagerTest, AllocationSpreadsAndHonoursPreferredTaskManagers) {
  ResourceManager rm(absl::Seconds(30), "jm-test");
  auto a = NewSession();
  auto b = NewSession();
  auto c = NewSession();
  ASSERT_TRUE(rm.Register(Registration("tm-a", 2), a).ok());
  ASSERT_TRUE(rm.Register(Registration("tm-b", 2), b).ok());
  absl::StatusOr<std::vector<SlotAssignment>> spread = rm.AllocateSlots("job-1", 2);
  ASSERT_TRUE(spread.ok()) << spread.status();
  EXPECT_NE((*spread)[0].taskmanager_id, (*spread)[1].taskmanager_id);
  rm.ReleaseSlots("job-1");

  ASSERT_TRUE(rm.Register(Registration("tm-c", 4), c).ok());
  // Without preferences both would go to tm-c (most free); subtask 0 and 1
  // return to tm-b and tm-a, an unknown TaskManager is no preference.
  absl::StatusOr<std::vector<SlotAssignment>> preferred =
      rm.AllocateSlots("job-1", 3, {"tm-b", "tm-a", "tm-gone"});
  ASSERT_TRUE(preferred.ok()) << preferred.status();
  EXPECT_EQ((*preferred)[0].taskmanager_id, "tm-b");
  EXPECT_EQ((*preferred)[1].taskmanager_id, "tm-a");
  EXPECT_EQ((*preferred)[2].taskmanager_id, "tm-c");
  // A full preferred TaskManager falls back to spreading.
  absl::StatusOr<std::vector<SlotAssignment>> full = rm.AllocateSlots("job-2", 2, {"tm-b", "tm-b"});
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ((*full)[0].taskmanager_id, "tm-b");
  EXPECT_EQ((*full)[1].taskmanager_id, "tm-c");
}

// Slots listeners hear of every registration and of every release that
// freed a slot (a job waiting for slots asks again), not of a release that
// freed none.
TEST(ResourceManagerTest, SlotsListenersHearOfRegistrationsAndReleases) {
  ResourceManager rm(absl::Seconds(30), "jm-test");
  int offers = 0;
  rm.AddSlotsListener([&] { ++offers; });
  auto a = NewSession();
  ASSERT_TRUE(rm.Register(Registration("tm-a", 2), a).ok());
  EXPECT_EQ(offers, 1);
  ASSERT_TRUE(rm.AllocateSlots("job-1", 2).ok());
  EXPECT_EQ(offers, 1);
  rm.ReleaseSlots("job-2");
  EXPECT_EQ(offers, 1);
  rm.ReleaseSlots("job-1");
  EXPECT_EQ(offers, 2);
}

// At fleet size: 10 000 slots over 500 TaskManagers land evenly (most free
// first), never one slot twice, and the free counts stay right through a
// release.
TEST(ResourceManagerTest, AllocationAtFleetSizeIsEvenAndExact) {
  constexpr int kTaskManagers = 500;
  constexpr int kSlots = 21;
  ResourceManager rm(absl::Seconds(30), "jm-test");
  for (int i = 0; i < kTaskManagers; ++i) {
    ASSERT_TRUE(rm.Register(Registration(absl::StrCat("tm-", i), kSlots), NewSession()).ok());
  }
  absl::StatusOr<std::vector<SlotAssignment>> big = rm.AllocateSlots("job-1", 10000);
  ASSERT_TRUE(big.ok()) << big.status();
  ASSERT_EQ(big->size(), 10000u);
  std::map<std::string, std::set<int>> used;
  for (const SlotAssignment& slot : *big) {
    EXPECT_TRUE(used[slot.taskmanager_id].insert(slot.slot_index).second) << slot.taskmanager_id;
  }
  ASSERT_EQ(used.size(), static_cast<size_t>(kTaskManagers));
  for (const auto& [id, slots] : used) EXPECT_EQ(slots.size(), 20u) << id;

  absl::StatusOr<std::vector<SlotAssignment>> rest = rm.AllocateSlots("job-2", 500);
  ASSERT_TRUE(rest.ok()) << rest.status();
  absl::StatusOr<std::vector<SlotAssignment>> none = rm.AllocateSlots("job-3", 1);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr("has 0 free (500 TaskManagers, 10500 slots in all)"));

  rm.ReleaseSlots("job-1");
  absl::StatusOr<std::vector<SlotAssignment>> again = rm.AllocateSlots("job-3", 10000);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(rm.AllocateSlots("job-4", 1).status().code(), absl::StatusCode::kResourceExhausted);
}

// Checkpoint messages go on the session of a TaskManager that offered to
// take them, registered at the address the job's slot names, and only while
// that registration lasts; every other case makes the caller call.
TEST(ResourceManagerTest, CheckpointMessagesGoOnlyToSessionsThatTakeThem) {
  ResourceManager rm(absl::Seconds(30), "jm-test");
  auto takes = NewSession();
  auto older = NewSession();
  v1::RegisterTaskManager offer = Registration("tm-new", 1);
  offer.set_takes_checkpoint_messages(true);
  absl::StatusOr<uint64_t> epoch = rm.Register(offer, takes);
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  ASSERT_TRUE(rm.Register(Registration("tm-old", 1), older).ok());

  EXPECT_EQ(rm.CheckpointMessageSession("tm-new", "127.0.0.1:1"), takes);
  EXPECT_EQ(rm.CheckpointMessageSession("tm-new", "127.0.0.1:2"), nullptr) << "another address: another process";
  EXPECT_EQ(rm.CheckpointMessageSession("tm-old", "127.0.0.1:1"), nullptr) << "did not offer";
  EXPECT_EQ(rm.CheckpointMessageSession("tm-gone", "127.0.0.1:1"), nullptr);

  rm.Unregister("tm-new", *epoch, LossReason::kConnectionClosed, "");
  EXPECT_EQ(rm.CheckpointMessageSession("tm-new", "127.0.0.1:1"), nullptr);
}

// A JobManager that loses its leadership: every session closed, its
// members forgotten without telling the loss listeners (the jobs are the
// next leader's), registrations refused until it leads again, then with
// the new epoch.
TEST(ResourceManagerTest, SteppingDownClosesEverySessionAndRefusesRegistrationsUntilItLeadsAgain) {
  ResourceManager rm(absl::Seconds(30), "jm-test", /*clock=*/nullptr, /*leader_epoch=*/7);
  int losses = 0;
  rm.AddLossListener([&](const v1::TaskManagerInfo&, LossReason) { ++losses; });
  auto a = NewSession();
  auto b = NewSession();
  absl::StatusOr<uint64_t> epoch_a = rm.Register(Registration("tm-a", 2), a);
  ASSERT_TRUE(epoch_a.ok());
  ASSERT_TRUE(rm.Register(Registration("tm-b", 2), b).ok());
  ASSERT_TRUE(rm.AllocateSlots("job-1", 3).ok());

  rm.StepDown("leadership lost");
  EXPECT_FALSE(rm.leading());
  EXPECT_TRUE(a->closed());
  EXPECT_TRUE(b->closed());
  EXPECT_TRUE(rm.List().empty());
  EXPECT_EQ(losses, 0);
  EXPECT_EQ(rm.Heartbeat("tm-a", *epoch_a, v1::SlotReport()).code(), absl::StatusCode::kNotFound);
  absl::StatusOr<uint64_t> refused = rm.Register(Registration("tm-c", 1), NewSession());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("standby"));
  EXPECT_EQ(rm.AllocateSlots("job-2", 1).status().code(), absl::StatusCode::kResourceExhausted);

  rm.Lead(12);
  EXPECT_TRUE(rm.leading());
  EXPECT_EQ(rm.leader_epoch(), 12);
  ASSERT_TRUE(rm.Register(Registration("tm-a", 2), NewSession()).ok());
  EXPECT_EQ(rm.List().size(), 1u);
  EXPECT_EQ(rm.List()[0].free_slots(), 2) << "the old leadership's allocations are gone";
}

}  // namespace
}  // namespace weir::jobmanager
