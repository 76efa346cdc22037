#include "common/retry/backoff.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace weir::retry {

absl::Status BackoffOptions::Validate() const {
  if (initial <= absl::ZeroDuration() || !(multiplier >= 1.0) || max < initial || !(jitter >= 0.0 && jitter <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "backoff: initial (", absl::FormatDuration(initial), ") must be positive, multiplier (", multiplier,
        ") at least 1, max (", absl::FormatDuration(max), ") at least initial and jitter (", jitter,
        ") between 0 and 1"));
  }
  return absl::OkStatus();
}

namespace {

double Draw(std::mt19937_64& engine) { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }

// One engine per thread, seeded from std::random_device: a Backoff costs no
// engine of its own (an input gate keeps one per channel), and two processes
// do not draw alike.
double RandomDraw() {
  thread_local std::mt19937_64 engine = [] {
    std::random_device device;
    return std::mt19937_64((static_cast<uint64_t>(device()) << 32) ^ device());
  }();
  return Draw(engine);
}

}  // namespace

UniformSource SeededUniformSource(uint64_t seed) {
  auto engine = std::make_shared<std::mt19937_64>(seed);
  return [engine] { return Draw(*engine); };
}

namespace {

BackoffOptions Clamped(BackoffOptions o) {
  if (o.initial <= absl::ZeroDuration()) o.initial = absl::Milliseconds(1);
  if (!(o.multiplier >= 1.0)) o.multiplier = 1.0;
  if (o.max < o.initial) o.max = o.initial;
  if (!(o.jitter >= 0.0)) o.jitter = 0.0;
  if (o.jitter > 1.0) o.jitter = 1.0;
  return o;
}

}  // namespace

Backoff::Backoff(BackoffOptions options)
    : Backoff(options, options.jitter > 0.0 ? UniformSource(RandomDraw) : UniformSource()) {}

Backoff::Backoff(BackoffOptions options, UniformSource uniform)
    : options_(Clamped(options)), uniform_(std::move(uniform)), delay_(options_.initial) {}

absl::Duration Backoff::Next() {
  absl::Duration wait = delay_;
  delay_ = std::min(options_.max, delay_ * options_.multiplier);
  if (options_.jitter > 0.0 && uniform_) {
    const double draw = std::clamp(uniform_(), 0.0, 1.0);
    wait -= wait * (options_.jitter * draw);
  }
  return wait;
}

void Backoff::Reset() { delay_ = options_.initial; }

RetryClock& RetryClock::Real() {
  static ClockBackedRetryClock* const clock = new ClockBackedRetryClock(time::Clock::Real());
  return *clock;
}

std::string RetryOutcome::Summary() const {
  return absl::StrCat(attempts, attempts == 1 ? " try" : " tries", " in ", absl::FormatDuration(elapsed));
}

RetryOutcome Retry(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> retryable,
                   absl::FunctionRef<void(const absl::Status&, absl::Duration wait)> on_retry) {
  RetryClock& clock = policy.clock != nullptr ? *policy.clock : RetryClock::Real();
  Backoff backoff = policy.uniform ? Backoff(policy.backoff, policy.uniform) : Backoff(policy.backoff);
  RetryOutcome outcome;
  const absl::Time start = clock.Now();
  for (;;) {
    ++outcome.attempts;
    outcome.status = attempt();
    if (outcome.status.ok()) {
      outcome.end = RetryOutcome::End::kSucceeded;
      break;
    }
    if (!retryable(outcome.status)) {
      outcome.end = RetryOutcome::End::kNotRetryable;
      break;
    }
    if (policy.max_attempts > 0 && outcome.attempts >= policy.max_attempts) {
      outcome.end = RetryOutcome::End::kAttempts;
      break;
    }
    const absl::Duration wait = backoff.Next();
    if (clock.Now() + wait > policy.deadline) {
      outcome.end = RetryOutcome::End::kDeadline;
      break;
    }
    on_retry(outcome.status, wait);
    if (!clock.Sleep(wait)) {
      outcome.end = RetryOutcome::End::kInterrupted;
      break;
    }
  }
  outcome.elapsed = clock.Now() - start;
  return outcome;
}

RetryOutcome Retry(const RetryPolicy& policy, absl::FunctionRef<absl::Status()> attempt,
                   absl::FunctionRef<bool(const absl::Status&)> retryable) {
  return Retry(policy, attempt, retryable, [](const absl::Status&, absl::Duration) {});
}

}  // namespace weir::retry
