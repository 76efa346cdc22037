// The restart strategies decide from the failure times the JobMaster reads
// off its clock; here those times come from a SimulatedClock that the test
// advances, as they would in a JobMaster running on one.
#include "jobmanager/restart_strategy.h"

#include <optional>

#include "common/time/simulated_clock.h"
#include "gtest/gtest.h"

namespace weir::jobmanager {
namespace {

TEST(RestartStrategyTest, NoneNeverRestarts) {
  time::SimulatedClock clock;
  std::unique_ptr<RestartStrategy> strategy = RestartStrategy::Create(RestartStrategyOptions{});
  EXPECT_EQ(strategy->OnFailure(clock.Now()), std::nullopt);
  clock.Advance(absl::Hours(24));
  EXPECT_EQ(strategy->OnFailure(clock.Now()), std::nullopt);
}

TEST(RestartStrategyTest, FixedDelayRestartsItsAttemptsAndNoMoreHoweverFarApart) {
  time::SimulatedClock clock;
  RestartStrategyOptions options;
  options.type = RestartStrategyOptions::Type::kFixedDelay;
  options.fixed_attempts = 2;
  options.fixed_delay = absl::Seconds(10);
  std::unique_ptr<RestartStrategy> strategy = RestartStrategy::Create(options);
  EXPECT_EQ(strategy->OnFailure(clock.Now()), absl::Seconds(10));
  clock.Advance(absl::Hours(5));  // attempts are not a rate: time does not give them back
  EXPECT_EQ(strategy->OnFailure(clock.Now()), absl::Seconds(10));
  clock.Advance(absl::Hours(5));
  EXPECT_EQ(strategy->OnFailure(clock.Now()), std::nullopt);
}

// Without jitter the delays are exact: they grow by the multiplier up to the
// cap while failures come closer together than the reset threshold, and
// start over from the initial backoff once a failure comes after a quiet
// period of at least the threshold (measured from the previous failure).
TEST(RestartStrategyTest, ExponentialDelayGrowsToItsCapAndStartsOverAfterAQuietPeriod) {
  time::SimulatedClock clock;
  RestartStrategyOptions options;
  options.type = RestartStrategyOptions::Type::kExponentialDelay;
  options.initial_backoff = absl::Seconds(1);
  options.multiplier = 2.0;
  options.max_backoff = absl::Seconds(10);
  options.reset_threshold = absl::Hours(1);
  options.jitter = 0.0;
  std::unique_ptr<RestartStrategy> strategy = RestartStrategy::Create(options);
  auto fail_after = [&](absl::Duration quiet) {
    clock.Advance(quiet);
    return strategy->OnFailure(clock.Now());
  };
  EXPECT_EQ(fail_after(absl::ZeroDuration()), absl::Seconds(1));
  EXPECT_EQ(fail_after(absl::Minutes(59)), absl::Seconds(2));
  EXPECT_EQ(fail_after(absl::Minutes(59)), absl::Seconds(4));
  EXPECT_EQ(fail_after(absl::Minutes(1)), absl::Seconds(8));
  EXPECT_EQ(fail_after(absl::Minutes(1)), absl::Seconds(10));  // capped
  EXPECT_EQ(fail_after(absl::Minutes(1)), absl::Seconds(10));
  // Just short of the threshold: no reset.
  EXPECT_EQ(fail_after(absl::Hours(1) - absl::Seconds(1)), absl::Seconds(10));
  // A quiet hour: back to the initial backoff, and growing again from there.
  EXPECT_EQ(fail_after(absl::Hours(1)), absl::Seconds(1));
  EXPECT_EQ(fail_after(absl::Seconds(5)), absl::Seconds(2));
  EXPECT_EQ(fail_after(absl::Hours(3)), absl::Seconds(1));
}

// With jitter, every delay lies within jitter of the un-jittered one.
TEST(RestartStrategyTest, ExponentialDelayJitterStaysWithinItsShare) {
  time::SimulatedClock clock;
  RestartStrategyOptions options;
  options.type = RestartStrategyOptions::Type::kExponentialDelay;
  options.initial_backoff = absl::Seconds(10);
  options.multiplier = 1.0;
  options.max_backoff = absl::Seconds(10);
  options.jitter = 0.25;
  std::unique_ptr<RestartStrategy> strategy = RestartStrategy::Create(options);
  for (int i = 0; i < 1000; ++i) {
    clock.Advance(absl::Seconds(30));
    const std::optional<absl::Duration> delay = strategy->OnFailure(clock.Now());
    ASSERT_TRUE(delay.has_value());
    EXPECT_GE(*delay, absl::Milliseconds(7500));
    EXPECT_LE(*delay, absl::Milliseconds(12500));
  }
}

}  // namespace
}  // namespace weir::jobmanager
