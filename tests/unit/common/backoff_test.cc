// Backoff: the exact waits for given draws, the cap, the jitter's bounds.
// Retry: when it tries again, how long it waits (on a simulated clock), and
// why it stops.
#include "common/retry/backoff.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/time/simulated_clock.h"

namespace weir::retry {
namespace {

using ::testing::ElementsAre;

// Returns `draws` in turn, then the last one again.
UniformSource Draws(std::vector<double> draws) {
  auto next = std::make_shared<size_t>(0);
  return [draws, next] { return draws[std::min(draws.size() - 1, (*next)++)]; };
}

std::vector<absl::Duration> Waits(Backoff& backoff, int n) {
  std::vector<absl::Duration> waits;
  for (int i = 0; i < n; ++i) waits.push_back(backoff.Next());
  return waits;
}

// Time moves only when the loop waits; every wait and try is recorded.
class RecordingClock : public RetryClock {
 public:
  absl::Time Now() override { return now_; }
  bool Sleep(absl::Duration duration) override {
    sleeps.push_back(duration);
    now_ += duration;
    return sleeps.size() != interrupt_at_sleep;
  }
  void Advance(absl::Duration d) { now_ += d; }

  std::vector<absl::Duration> sleeps;
  size_t interrupt_at_sleep = 0;  // 1-based; 0: never

 private:
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

bool Unavailable(const absl::Status& s) { return absl::IsUnavailable(s); }

TEST(BackoffTest, DoublesUpToTheCapWithoutJitter) {
  Backoff backoff({.initial = absl::Milliseconds(100), .multiplier = 2, .max = absl::Milliseconds(700)});
  EXPECT_THAT(Waits(backoff, 5), ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400),
                                             absl::Milliseconds(700), absl::Milliseconds(700)));
}

TEST(BackoffTest, MultipliesByTheMultiplier) {
  Backoff backoff({.initial = absl::Milliseconds(100), .multiplier = 1.5, .max = absl::Seconds(10)});
  EXPECT_THAT(Waits(backoff, 3), ElementsAre(absl::Milliseconds(100), absl::Milliseconds(150), absl::Milliseconds(225)));
}

TEST(BackoffTest, ResetStartsOverFromTheInitialDelay) {
  Backoff backoff({.initial = absl::Milliseconds(50), .multiplier = 2, .max = absl::Seconds(1)});
  Waits(backoff, 4);
  backoff.Reset();
  EXPECT_THAT(Waits(backoff, 2), ElementsAre(absl::Milliseconds(50), absl::Milliseconds(100)));
}

TEST(BackoffTest, JitterShortensEachWaitByItsFractionOfTheDraw) {
  // wait = d * (1 - jitter * draw)
  Backoff backoff({.initial = absl::Milliseconds(100), .multiplier = 2, .max = absl::Seconds(2), .jitter = 0.5},
                  Draws({0.0, 0.5, 0.75, 1.0}));
  EXPECT_THAT(Waits(backoff, 4), ElementsAre(absl::Milliseconds(100), absl::Milliseconds(150), absl::Milliseconds(250),
                                             absl::Milliseconds(400)));
}

TEST(BackoffTest, FullJitterMayShortenAWaitToNothing) {
  Backoff backoff({.initial = absl::Milliseconds(100), .multiplier = 2, .max = absl::Seconds(2), .jitter = 1},
                  Draws({0.25, 1.0}));
  EXPECT_THAT(Waits(backoff, 2), ElementsAre(absl::Milliseconds(75), absl::ZeroDuration()));
}

TEST(BackoffTest, JitteredWaitsStayWithinTheirBoundsAndTheCap) {
  const BackoffOptions options{
      .initial = absl::Milliseconds(100), .multiplier = 2, .max = absl::Milliseconds(1600), .jitter = 0.5};
  Backoff plain({.initial = options.initial, .multiplier = options.multiplier, .max = options.max});
  Backoff jittered(options, SeededUniformSource(42));
  absl::Duration shortest_at_cap = absl::InfiniteDuration();
  absl::Duration longest_at_cap = absl::ZeroDuration();
  for (int i = 0; i < 2000; ++i) {
    const absl::Duration d = plain.Next();
    const absl::Duration wait = jittered.Next();
    ASSERT_GE(wait, d * 0.5) << "wait " << i;
    ASSERT_LE(wait, d) << "wait " << i;
    ASSERT_LE(wait, options.max) << "wait " << i;
    if (d == options.max) {
      shortest_at_cap = std::min(shortest_at_cap, wait);
      longest_at_cap = std::max(longest_at_cap, wait);
    }
  }
  // The draws spread over the range rather than sitting at one end.
  EXPECT_LT(shortest_at_cap, absl::Milliseconds(850));
  EXPECT_GT(longest_at_cap, absl::Milliseconds(1550));
}

TEST(BackoffTest, ASeedRepeatsItsWaitsAndAnotherSeedDiffers) {
  const BackoffOptions options{.initial = absl::Milliseconds(100), .max = absl::Seconds(2), .jitter = 1};
  Backoff a(options, SeededUniformSource(7));
  Backoff b(options, SeededUniformSource(7));
  Backoff c(options, SeededUniformSource(8));
  const std::vector<absl::Duration> waits = Waits(a, 8);
  EXPECT_EQ(waits, Waits(b, 8));
  EXPECT_NE(waits, Waits(c, 8));
}

TEST(BackoffTest, SeededSourceDrawsTheTop53BitsOfMt19937_64) {
  std::mt19937_64 engine(5);
  UniformSource source = SeededUniformSource(5);
  for (int i = 0; i < 100; ++i) {
    const double draw = source();
    ASSERT_EQ(draw, static_cast<double>(engine() >> 11) * 0x1.0p-53);
    ASSERT_GE(draw, 0.0);
    ASSERT_LT(draw, 1.0);
  }
}

TEST(BackoffOptionsTest, ValidateRefusesWhatCannotBeABackoff) {
  EXPECT_TRUE(BackoffOptions{}.Validate().ok());
  EXPECT_EQ(BackoffOptions{.initial = absl::ZeroDuration()}.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BackoffOptions{.multiplier = 0.5}.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((BackoffOptions{.initial = absl::Seconds(3), .max = absl::Seconds(2)}.Validate().code()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BackoffOptions{.jitter = 1.5}.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BackoffOptions{.jitter = -0.1}.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BackoffOptionsTest, ABackoffClampsWhatValidateRefuses) {
  EXPECT_EQ(BackoffOptions{.multiplier = std::nan("")}.Validate().code(), absl::StatusCode::kInvalidArgument);
  Backoff backoff({.initial = absl::ZeroDuration(), .multiplier = 0.5, .max = -absl::Seconds(1)});
  // 1 ms, no shrinking, capped at the initial delay.
  EXPECT_THAT(Waits(backoff, 3), ElementsAre(absl::Milliseconds(1), absl::Milliseconds(1), absl::Milliseconds(1)));
}

TEST(RetryTest, TriesAgainAfterEachWaitUntilItSucceeds) {
  RecordingClock clock;
  RetryPolicy policy{.backoff = {.initial = absl::Milliseconds(100), .max = absl::Seconds(2)}, .clock = &clock};
  int attempts = 0;
  std::vector<absl::Duration> heard;
  RetryOutcome outcome = Retry(
      policy, [&] { return ++attempts < 4 ? absl::UnavailableError("down") : absl::OkStatus(); }, Unavailable,
      [&](const absl::Status& s, absl::Duration wait) {
        EXPECT_EQ(s.message(), "down");
        heard.push_back(wait);
      });
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(outcome.end, RetryOutcome::End::kSucceeded);
  EXPECT_EQ(outcome.attempts, 4);
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Milliseconds(100), absl::Milliseconds(200), absl::Milliseconds(400)));
  EXPECT_EQ(heard, clock.sleeps);
  EXPECT_EQ(outcome.elapsed, absl::Milliseconds(700));
  EXPECT_EQ(outcome.Summary(), "4 tries in 700ms");
}

TEST(RetryTest, ReturnsAnErrorItMayNotRetryAtOnce) {
  RecordingClock clock;
  RetryPolicy policy{.clock = &clock};
  int attempts = 0;
  RetryOutcome outcome = Retry(
      policy,
      [&] { return ++attempts < 2 ? absl::UnavailableError("down") : absl::UnauthenticatedError("wrong password"); },
      Unavailable);
  EXPECT_EQ(outcome.status, absl::UnauthenticatedError("wrong password"));
  EXPECT_EQ(outcome.end, RetryOutcome::End::kNotRetryable);
  EXPECT_EQ(outcome.attempts, 2);
  EXPECT_EQ(clock.sleeps.size(), 1u);
}

TEST(RetryTest, GivesUpWhenTheNextWaitWouldEndPastTheDeadline) {
  RecordingClock clock;
  // Waits of 100, 200, 400 ms end at 700 ms; the next (800 ms) would end at
  // 1.5 s, past the deadline at 1 s.
  RetryPolicy policy{.backoff = {.initial = absl::Milliseconds(100), .max = absl::Seconds(2)},
                     .deadline = clock.Now() + absl::Seconds(1),
                     .clock = &clock};
  int attempts = 0;
  RetryOutcome outcome = Retry(policy, [&] { return ++attempts, absl::UnavailableError("down"); }, Unavailable);
  EXPECT_EQ(outcome.status, absl::UnavailableError("down"));
  EXPECT_EQ(outcome.end, RetryOutcome::End::kDeadline);
  EXPECT_EQ(outcome.attempts, 4);
  EXPECT_EQ(attempts, 4);
  EXPECT_EQ(outcome.elapsed, absl::Milliseconds(700));
}

TEST(RetryTest, AWaitEndingExactlyAtTheDeadlineIsTaken) {
  RecordingClock clock;
  RetryPolicy policy{.backoff = {.initial = absl::Milliseconds(100), .max = absl::Seconds(2)},
                     .deadline = clock.Now() + absl::Milliseconds(300),
                     .clock = &clock};
  RetryOutcome outcome = Retry(policy, [] { return absl::UnavailableError("down"); }, Unavailable);
  EXPECT_EQ(outcome.attempts, 3);
  EXPECT_EQ(outcome.elapsed, absl::Milliseconds(300));
}

TEST(RetryTest, NoTryStartsPastTheDeadlineWhateverTheJitterAndTheTriesTake) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    RecordingClock clock;
    const absl::Time deadline = clock.Now() + absl::Seconds(5);
    RetryPolicy policy{.backoff = {.initial = absl::Milliseconds(50), .max = absl::Seconds(1), .jitter = 1},
                       .deadline = deadline,
                       .uniform = SeededUniformSource(seed),
                       .clock = &clock};
    std::vector<absl::Time> starts;
    RetryOutcome outcome = Retry(
        policy,
        [&] {
          starts.push_back(clock.Now());
          clock.Advance(absl::Milliseconds(30));  // each try takes a while
          return absl::UnavailableError("down");
        },
        Unavailable);
    EXPECT_EQ(outcome.end, RetryOutcome::End::kDeadline) << "seed " << seed;
    ASSERT_GT(starts.size(), 5u) << "seed " << seed;
    for (absl::Time start : starts) EXPECT_LE(start, deadline) << "seed " << seed;
  }
}

TEST(RetryTest, TheFirstTryRunsEvenPastTheDeadline) {
  RecordingClock clock;
  RetryPolicy policy{.deadline = clock.Now() - absl::Seconds(1), .clock = &clock};
  int attempts = 0;
  RetryOutcome outcome = Retry(
      policy, [&] { return ++attempts, absl::UnavailableError("down"); }, Unavailable,
      [](const absl::Status&, absl::Duration) { ADD_FAILURE() << "waited past the deadline"; });
  EXPECT_EQ(outcome.end, RetryOutcome::End::kDeadline);
  EXPECT_EQ(attempts, 1);
  EXPECT_TRUE(clock.sleeps.empty());
}

TEST(RetryTest, StopsAfterMaxAttemptsWithoutAWaitAfterTheLast) {
  RecordingClock clock;
  RetryPolicy policy{.backoff = {.initial = absl::Milliseconds(200), .max = absl::Seconds(10)},
                     .max_attempts = 3,
                     .clock = &clock};
  RetryOutcome outcome = Retry(policy, [] { return absl::UnavailableError("down"); }, Unavailable);
  EXPECT_EQ(outcome.end, RetryOutcome::End::kAttempts);
  EXPECT_EQ(outcome.attempts, 3);
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Milliseconds(200), absl::Milliseconds(400)));
}

TEST(RetryTest, StopsWhenAWaitIsCutShort) {
  RecordingClock clock;
  clock.interrupt_at_sleep = 2;
  RetryPolicy policy{.clock = &clock};
  int attempts = 0;
  RetryOutcome outcome = Retry(policy, [&] { return ++attempts, absl::UnavailableError("down"); }, Unavailable);
  EXPECT_EQ(outcome.end, RetryOutcome::End::kInterrupted);
  EXPECT_EQ(outcome.status, absl::UnavailableError("down"));
  EXPECT_EQ(attempts, 2);
}

TEST(RetryTest, SucceedsAtOnceWithoutWaiting) {
  RecordingClock clock;
  RetryPolicy policy{.clock = &clock};
  RetryOutcome outcome = Retry(policy, [] { return absl::OkStatus(); }, Unavailable);
  EXPECT_TRUE(outcome.status.ok());
  EXPECT_EQ(outcome.attempts, 1);
  EXPECT_EQ(outcome.Summary(), "1 try in 0");
  EXPECT_TRUE(clock.sleeps.empty());
}

// On a simulated time::Clock, the loop's waits are the clock's: no try
// starts before the test has moved the clock past the wait before it.
TEST(RetryTest, WaitsOnATimeClockThatATestAdvances) {
  time::SimulatedClock simulated;
  ClockBackedRetryClock clock(simulated);
  const absl::Time start = simulated.Now();
  RetryPolicy policy{.backoff = {.initial = absl::Minutes(1), .max = absl::Minutes(10)}, .clock = &clock};
  absl::Mutex mu;
  std::vector<absl::Time> tries;
  RetryOutcome outcome;
  std::thread loop([&] {
    outcome = Retry(
        policy,
        [&] {
          absl::MutexLock lock(&mu);
          tries.push_back(simulated.Now());
          return tries.size() < 3 ? absl::UnavailableError("down") : absl::OkStatus();
        },
        Unavailable);
  });
  auto tried = [&](size_t n) {
    absl::MutexLock lock(&mu);
    return tries.size() == n;
  };
  ASSERT_TRUE(simulated.WaitUntilParked(1, absl::Seconds(60)));  // waiting the first minute
  EXPECT_TRUE(tried(1));
  simulated.Advance(absl::Seconds(59));
  ASSERT_TRUE(simulated.WaitUntilParked(1, absl::Seconds(60)));
  EXPECT_TRUE(tried(1));
  simulated.Advance(absl::Seconds(1));
  // The second try, then the wait of two minutes.
  ASSERT_TRUE(simulated.WaitUntilParked(1, absl::Seconds(60)));
  EXPECT_TRUE(tried(2));
  simulated.Advance(absl::Minutes(2));
  loop.join();
  EXPECT_TRUE(outcome.status.ok()) << outcome.status;
  EXPECT_EQ(outcome.attempts, 3);
  EXPECT_EQ(tries, (std::vector<absl::Time>{start, start + absl::Minutes(1), start + absl::Minutes(3)}));
  EXPECT_EQ(outcome.elapsed, absl::Minutes(3));
}

}  // namespace
}  // namespace weir::retry
