// SerialExecutor: tasks run one at a time in the order posted, on its own
// thread; timers are the clock's (here a SimulatedClock); Shutdown drops
// or drains what is queued and refuses the rest. Waits have a generous
// real-time deadline and nothing asserts how long they took.
#include "common/executor/serial_executor.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/simulated_clock.h"

namespace weir {
namespace {

using ::testing::ElementsAre;

constexpr absl::Duration kPatience = absl::Seconds(60);

class SerialExecutorTest : public ::testing::Test {
 protected:
  void Record(int n) {
    absl::MutexLock lock(&mu_);
    done_.push_back(n);
  }
  std::vector<int> Done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  time::SimulatedClock clock_;
  absl::Mutex mu_;
  std::vector<int> done_ ABSL_GUARDED_BY(mu_);
};

TEST_F(SerialExecutorTest, RunsTasksInTheOrderPostedOnItsOwnThread) {
  SerialExecutor executor("test", clock_);
  executor.Start();
  for (int i = 0; i < 100; ++i) {
    executor.Post([this, &executor, i] {
      EXPECT_TRUE(executor.InExecutor());
      Record(i);
    });
  }
  EXPECT_FALSE(executor.InExecutor());
  ASSERT_TRUE(executor.PostAndWait([] {}));
  std::vector<int> expected(100);
  for (int i = 0; i < 100; ++i) expected[i] = i;
  EXPECT_EQ(Done(), expected);
}

TEST_F(SerialExecutorTest, ATimerPostsItsTaskWhenTheClockReachesItsTime) {
  SerialExecutor executor("test", clock_);
  executor.Start();
  const absl::Time start = clock_.Now();
  executor.PostAt(start + absl::Seconds(10), [this] { Record(10); });
  const time::TimerHandle withdrawn = executor.PostAt(start + absl::Seconds(5), [this] { Record(5); });
  EXPECT_TRUE(executor.CancelTimer(withdrawn));
  clock_.Advance(absl::Seconds(10) - absl::Milliseconds(1));
  ASSERT_TRUE(executor.PostAndWait([] {}));
  EXPECT_THAT(Done(), ElementsAre());
  clock_.Advance(absl::Milliseconds(1));
  // The timer posted before Advance returned; this task comes after it.
  ASSERT_TRUE(executor.PostAndWait([] {}));
  EXPECT_THAT(Done(), ElementsAre(10));
  EXPECT_EQ(clock_.pending_timers(), 0u);
}

TEST_F(SerialExecutorTest, ShutdownDropsQueuedTasksWithdrawsTimersAndRefusesNewOnes) {
  SerialExecutor executor("test", clock_);
  executor.Start();
  absl::Notification started, release;
  executor.Post([&] {
    started.Notify();
    release.WaitForNotification();
  });
  ASSERT_TRUE(started.WaitForNotificationWithTimeout(kPatience));
  executor.Post([this] { Record(1); });
  executor.PostAt(clock_.Now() + absl::Seconds(1), [this] { Record(2); });
  executor.Shutdown();
  release.Notify();
  executor.Join();
  EXPECT_EQ(clock_.pending_timers(), 0u);
  EXPECT_FALSE(executor.Post([this] { Record(3); }));
  EXPECT_FALSE(executor.PostAndWait([this] { Record(4); }));
  clock_.Advance(absl::Seconds(1));
  EXPECT_THAT(Done(), ElementsAre());
}

TEST_F(SerialExecutorTest, ShutdownWithDrainRunsWhatIsQueued) {
  SerialExecutor executor("test", clock_);
  executor.Start();
  absl::Notification release;
  executor.Post([&] { release.WaitForNotification(); });
  executor.Post([this] { Record(1); });
  executor.Post([this] { Record(2); });
  executor.Shutdown(/*drain=*/true);
  EXPECT_FALSE(executor.Post([this] { Record(3); }));
  release.Notify();
  executor.Join();
  EXPECT_THAT(Done(), ElementsAre(1, 2));
}

TEST_F(SerialExecutorTest, ATaskMayShutItsOwnExecutorDown) {
  SerialExecutor executor("test", clock_);
  executor.Start();
  executor.Post([this, &executor] {
    Record(1);
    executor.Shutdown();
  });
  executor.Post([this] { Record(2); });
  executor.Join();
  EXPECT_THAT(Done(), ElementsAre(1));
}

}  // namespace
}  // namespace weir
