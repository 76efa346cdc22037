// Backoff and Retry: how Weir waits between tries of a call that may pass
// (a connection refused, a server restarting, a coordinator moving), and the
// loop that tries until it succeeds, meets an error no wait can fix, runs out
// of tries, or would start a try past its deadline.
//
//   retry::RetryPolicy policy;
//   policy.backoff = {.initial = absl::Milliseconds(100), .max = absl::Seconds(2), .jitter = 0.5};
//   policy.deadline = absl::Now() + absl::Seconds(30);
//   retry::RetryOutcome outcome = retry::Retry(
//       policy, [&] { return Connect(); }, [](const absl::Status& s) { return absl::IsUnavailable(s); });
//   if (!outcome.status.ok()) return Annotate(outcome.status, outcome.Summary());
//
// Jitter. Many processes that fail at the same moment (the TaskManagers of a
// cluster whose JobManager restarted, the subtasks of a sink whose database
// restarted) would otherwise come back together at the same doubling delays,
// in waves. Each wait is therefore shortened at random by up to `jitter` of
// itself: it is drawn uniformly from [d * (1 - jitter), d], where d is the
// un-jittered delay. jitter = 1 is "full jitter" (anywhere in (0, d]), 0.5 is
// "equal jitter" (half fixed, half random) and 0 none. Jitter only ever
// shortens a wait, so the cap bounds every wait and the number of tries
// before a deadline is never smaller than without it.
//
// Thread-safety: a Backoff belongs to one retry loop and is not safe for
// concurrent use. Retry calls its arguments on the caller's thread and waits
// there (or in its RetryClock).
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/time/clock.h"

namespace weir::retry {

// The waits of a retry loop: `initial`, multiplied by `multiplier` after each
// wait up to `max`, each shortened by up to `jitter` of itself (see above).
struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(100);
  double multiplier = 2.0;
  absl::Duration max = absl::Seconds(2);
  double jitter = 0.0;  // in [0, 1]

  // InvalidArgument unless initial > 0, multiplier >= 1, max >= initial and
  // jitter in [0, 1]. Backoff clamps what does not hold; check options that
  // come from a user here first.
  absl::Status Validate() const;
};

// Uniform draws in [0, 1) for the jitter.
using UniformSource = std::function<double()>;

// A source that repeats the same draws for the same seed on every platform
// (std::mt19937_64's sequence is fixed by the standard; the draw takes its
// top 53 bits), for tests and reproducible runs.
UniformSource SeededUniformSource(uint64_t seed);

// The waits of one retry loop, one after another. Not thread-safe.
class Backoff {
 public:
  // Jitter drawn from an engine per thread seeded from std::random_device,
  // so that two processes do not draw alike.
  explicit Backoff(BackoffOptions options);
  // Jitter drawn from `uniform` (unused when options.jitter is 0).
  Backoff(BackoffOptions options, UniformSource uniform);

  // The next wait, and the un-jittered delay moves on (multiplied, capped).
  absl::Duration Next();
  // Starts over from `initial` (after a success: a session that registered,
  // a connection that worked).
  void Reset();

  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
  UniformSource uniform_;
  absl::Duration delay_;  // the next wait before jitter
};

// How a retry loop reads the time and waits. The real one is the wall clock
// (time::Clock::Real()); code that runs on a time::Clock (the JobManager's)
// passes a ClockBackedRetryClock of it, so that a simulated clock drives its
// retries too; loops that must stop early (on shutdown) pass one whose Sleep
// returns false.
class RetryClock {
 public:
  virtual ~RetryClock() = default;
  virtual absl::Time Now() = 0;
  // Waits `duration`; false when the wait was cut short and the loop must
  // stop trying.
  virtual bool Sleep(absl::Duration duration) = 0;

  // time::Clock::Real()'s Now and SleepFor; thread-safe.
  static RetryClock& Real();
};

// A RetryClock on a time::Clock: its Now, and its SleepFor, never cut short.
// Thread-safe, as every time::Clock; `clock` must outlive it.
class ClockBackedRetryClock final : public RetryClock {
 public:
  explicit ClockBackedRetryClock(time::Clock& clock) : clock_(clock) {}
  absl::Time Now() override { return clock_.Now(); }
  bool Sleep(absl::Duration duration) override {
    clock_.SleepFor(duration);
    return true;
  }

 private:
  time::Clock& clock_;
};

struct RetryPolicy {
  BackoffOptions backoff;
  // No try starts after this: a wait that would end past it is not taken.
  // The first try always runs. Default: no deadline.
  absl::Time deadline = absl::InfiniteFuture();
  // At most this many tries; 0: no limit.
  int max_attempts = 0;
  // The jitter's draws; empty: seeded from std::random_device.
  UniformSource uniform;
  // nullptr: RetryClock::Real().
  RetryClock* clock = nullptr;
};

struct RetryOutcome {
  // Why the loop ended.
  enum class End {
    kSucceeded,     // a try returned OK
    kNotRetryable,  // `retryable` refused the last try's error
    kDeadline,      // the next wait would have ended past the deadline
    kAttempts,      // max_attempts tries failed
    kInterrupted,   // the clock's Sleep returned false
  };

  absl::Status status;  // OK, or the last try's error as it was
  End end = End::kSucceeded;
  int attempts = 0;        // tries made
  absl::Duration elapsed;  // from the first try's start to the end

  // "3 tries in 1.2s", for messages.
  std::string Summary() const;
};

// Calls `attempt` until it returns OK or the policy ends the loop (see
// RetryOutcome::End). Between tries it waits the backoff's next wait, after
// telling `on_retry` the error and that wait.
RetryOutcome Retry(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> retryable,
                   absl::FunctionRef<void(const absl::Status&, absl::Duration wait)> on_retry);
RetryOutcome Retry(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> retryable);

}  // namespace weir::retry
