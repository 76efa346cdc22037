// The clocks of common/time: the simulated one, which the JobManager's tests
// drive, in detail; the real one's timers and waits briefly, on real time
// (each test waits for what it needs with a generous deadline and asserts
// nothing about how long it took).
#include "common/time/simulated_clock.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/clock.h"

namespace weir::time {
namespace {

using ::testing::ElementsAre;

constexpr absl::Duration kPatience = absl::Seconds(60);

TEST(SimulatedClockTest, TimeMovesOnlyWhenAdvanced) {
  SimulatedClock clock;
  const absl::Time start = clock.Now();
  EXPECT_EQ(clock.Now(), start);
  clock.Advance(absl::Minutes(10));
  EXPECT_EQ(clock.Now(), start + absl::Minutes(10));
  clock.Advance(-absl::Seconds(1));
  EXPECT_EQ(clock.Now(), start + absl::Minutes(10));
  clock.AdvanceTo(start + absl::Hours(1));
  EXPECT_EQ(clock.Now(), start + absl::Hours(1));
}

TEST(SimulatedClockTest, TimersFireInTimeOrderAtTheirTime) {
  SimulatedClock clock;
  const absl::Time start = clock.Now();
  std::vector<std::string> fired;
  std::vector<absl::Time> seen;
  auto timer = [&](std::string name) {
    return [&, name] {
      fired.push_back(name);
      seen.push_back(clock.Now());
    };
  };
  clock.Schedule(start + absl::Seconds(3), timer("c"));
  clock.Schedule(start + absl::Seconds(1), timer("a"));
  clock.Schedule(start + absl::Seconds(2), timer("b1"));
  clock.Schedule(start + absl::Seconds(2), timer("b2"));  // same time: scheduling order
  clock.Schedule(start + absl::Seconds(9), timer("late"));
  clock.Advance(absl::Seconds(5));
  EXPECT_THAT(fired, ElementsAre("a", "b1", "b2", "c"));
  EXPECT_THAT(seen, ElementsAre(start + absl::Seconds(1), start + absl::Seconds(2), start + absl::Seconds(2),
                                start + absl::Seconds(3)));
  EXPECT_EQ(clock.Now(), start + absl::Seconds(5));
  EXPECT_EQ(clock.pending_timers(), 1u);
  clock.Advance(absl::Seconds(4));
  EXPECT_THAT(fired, ElementsAre("a", "b1", "b2", "c", "late"));
  EXPECT_EQ(clock.pending_timers(), 0u);
}

TEST(SimulatedClockTest, ATimerScheduledByATimerFiresInTheSameAdvanceWhenDue) {
  SimulatedClock clock;
  std::vector<absl::Time> fired;
  const absl::Time start = clock.Now();
  clock.Schedule(start + absl::Seconds(1), [&] {
    fired.push_back(clock.Now());
    clock.Schedule(clock.Now() + absl::Seconds(1), [&] { fired.push_back(clock.Now()); });
    clock.Schedule(clock.Now() + absl::Seconds(10), [&] { fired.push_back(clock.Now()); });
  });
  clock.Advance(absl::Seconds(5));
  EXPECT_THAT(fired, ElementsAre(start + absl::Seconds(1), start + absl::Seconds(2)));
  EXPECT_EQ(clock.pending_timers(), 1u);
}

TEST(SimulatedClockTest, ACancelledTimerNeverFires) {
  SimulatedClock clock;
  int fired = 0;
  TimerHandle kept = clock.Schedule(clock.Now() + absl::Seconds(1), [&] { fired += 1; });
  TimerHandle cancelled = clock.Schedule(clock.Now() + absl::Seconds(1), [&] { fired += 100; });
  EXPECT_TRUE(clock.Cancel(cancelled));
  EXPECT_FALSE(clock.Cancel(cancelled));
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(fired, 1);
  EXPECT_FALSE(clock.Cancel(kept));  // it ran
  EXPECT_FALSE(clock.Cancel(TimerHandle{}));
}

TEST(SimulatedClockTest, AWaiterWakesWhenTimePassesItsDeadlineAndNotBefore) {
  SimulatedClock clock;
  const absl::Time deadline = clock.Now() + absl::Minutes(10);
  absl::Mutex mu;
  bool flag = false;
  std::atomic<bool> returned{false};
  std::atomic<bool> result{true};
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag), deadline);
    returned = true;
  });
  ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
  clock.Advance(absl::Minutes(9));
  // The advance made it re-check, on the advancing thread, before Advance
  // returned; its deadline lies ahead, so it waits on.
  ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
  EXPECT_FALSE(returned);
  clock.Advance(absl::Minutes(1));
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(result);
  EXPECT_EQ(clock.parked(), 0);
}

TEST(SimulatedClockTest, AWaiterWakesWhenItsConditionHoldsWithoutTimePassing) {
  SimulatedClock clock;
  const absl::Time start = clock.Now();
  absl::Mutex mu;
  bool flag = false;
  bool result = false;
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&flag), absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  EXPECT_TRUE(result);
  EXPECT_EQ(clock.Now(), start);
}

TEST(SimulatedClockTest, SleepForReturnsOnceTheClockReachesItsEnd) {
  SimulatedClock clock;
  absl::Notification slept;
  std::thread sleeper([&] {
    clock.SleepFor(absl::Hours(2));
    slept.Notify();
  });
  ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
  clock.Advance(absl::Hours(1));
  ASSERT_TRUE(clock.WaitUntilParked(1, kPatience));
  EXPECT_FALSE(slept.HasBeenNotified());
  clock.Advance(absl::Hours(1));
  EXPECT_TRUE(slept.WaitForNotificationWithTimeout(kPatience));
  sleeper.join();
}

// Many threads wait with deadlines spread over an hour, some on a shared
// mutex and some on their own (each sleeping), while timers fire; several
// threads advance at once. Every waiter must return exactly when the clock
// has passed its deadline, and every timer must fire once.
TEST(SimulatedClockTest, ManyWaitersAndAdvancersAcrossThreads) {
  SimulatedClock clock;
  const absl::Time start = clock.Now();
  constexpr int kWaiters = 40;
  constexpr int kTimers = 200;
  absl::Mutex shared;
  bool never = false;
  std::atomic<int> late{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    const absl::Time deadline = start + absl::Minutes(1 + i);
    waiters.emplace_back([&, i, deadline] {
      if (i % 2 == 0) {
        absl::MutexLock lock(&shared);
        clock.AwaitWithDeadline(&shared, absl::Condition(&never), deadline);
      } else {
        clock.SleepUntil(deadline);
      }
      if (clock.Now() < deadline) late.fetch_add(1);  // woke early
    });
  }
  std::atomic<int> fired{0};
  for (int i = 0; i < kTimers; ++i) {
    clock.Schedule(start + absl::Seconds(17 * i), [&] { fired.fetch_add(1); });
  }
  ASSERT_TRUE(clock.WaitUntilParked(kWaiters, kPatience));
  std::vector<std::thread> advancers;
  for (int a = 0; a < 4; ++a) {
    advancers.emplace_back([&] {
      for (int step = 0; step < 30; ++step) clock.Advance(absl::Seconds(31));
    });
  }
  for (std::thread& t : advancers) t.join();
  EXPECT_EQ(clock.Now(), start + absl::Seconds(4 * 30 * 31));  // 62 minutes
  for (std::thread& t : waiters) t.join();
  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(clock.parked(), 0);
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(fired.load(), kTimers);
}

TEST(RealClockTest, TimersRunInTimeOrderAndACancelledOneDoesNot) {
  Clock& clock = Clock::Real();
  absl::Mutex mu;
  std::vector<int> fired;
  auto record = [&](int n) {
    return [&, n] {
      absl::MutexLock lock(&mu);
      fired.push_back(n);
    };
  };
  const absl::Time now = clock.Now();
  clock.Schedule(now + absl::Milliseconds(30), record(3));
  TimerHandle cancelled = clock.Schedule(now + absl::Milliseconds(20), record(99));
  clock.Schedule(now + absl::Milliseconds(10), record(2));
  clock.Schedule(now - absl::Seconds(1), record(1));  // already due
  EXPECT_TRUE(clock.Cancel(cancelled));
  absl::MutexLock lock(&mu);
  auto three = [&] { return fired.size() >= 3; };
  ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&three), kPatience));
  EXPECT_THAT(fired, ElementsAre(1, 2, 3));
}

TEST(RealClockTest, AwaitReturnsTheConditionAtTheDeadline) {
  Clock& clock = Clock::Real();
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  EXPECT_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&flag), clock.Now() + absl::Milliseconds(1)));
  flag = true;
  EXPECT_TRUE(clock.AwaitWithTimeout(&mu, absl::Condition(&flag), kPatience));
  const absl::Time before = clock.Now();
  clock.SleepFor(absl::Milliseconds(1));
  EXPECT_GE(clock.Now(), before + absl::Milliseconds(1));
}

}  // namespace
}  // namespace weir::time
