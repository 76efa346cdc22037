// The restart strategies decide from the failure times the JobMaster reads
// off its clock; here those times come from a SimulatedClock that the test
// advances, as they would in a JobMaster running on one.
#include "jobmanager/restart_strategy.h"

#include <optional>

#include "absl/strings/match.h"
#include "common/config/configuration.h"
#include "common/config/options.h"
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

// NaN and the infinities compare false with every bound, so a range check
// alone lets them through (a NaN jitter made the delay 2^63 ms). Every
// floating-point key of the strategies refuses them, naming the key.
TEST(RestartStrategyTest, NonFiniteFactorsAreRefusedNamingTheKey) {
  int checked = 0;
  for (absl::string_view key : {config::keys::kRestartJitterFactor, config::keys::kRestartBackoffMultiplier}) {
    for (const char* value : {"nan", "NaN", "inf", "-inf", "infinity"}) {
      absl::StatusOr<config::Configuration> config = config::Configuration::Load(
          std::nullopt, {"restart-strategy.type=exponential-delay", absl::StrCat(key, "=", value)});
      if (!config.ok()) continue;  // refused by the schema already: also fine
      ++checked;
      absl::StatusOr<RestartStrategyOptions> options = RestartStrategyOptions::FromConfig(*config, true);
      ASSERT_FALSE(options.ok()) << key << "=" << value;
      EXPECT_TRUE(absl::StrContains(options.status().message(), key)) << options.status();
    }
  }
  EXPECT_GT(checked, 0) << "the schema refused every value: this test checks nothing any more";
}

}  // namespace
}  // namespace weir::jobmanager
