// Clock: where the JobManager's time comes from. Everything that decides by
// time (restart delays, checkpoint timeouts and intervals, heartbeat
// timeouts, deadlines of retries and cancellations) reads Now() and waits
// through a Clock, so that a test can run it on a SimulatedClock whose time
// moves only when the test advances it.
//
// A Clock offers three ways to wait:
//   - AwaitWithDeadline: the thread holds a mutex and waits until a condition
//     over what that mutex guards holds, or until the clock reaches a
//     deadline (what absl::Mutex::AwaitWithDeadline does on real time);
//   - SleepUntil / SleepFor: no condition;
//   - Schedule: a callback runs once the clock reaches a time, on a thread of
//     the clock's (a timer), and Cancel withdraws it.
//
// Poll intervals for state that gives no notification (a loop that looks at
// something every 20 ms) are not decisions and stay on real time; only the
// deadline that ends such a loop comes from the clock.
//
// Thread-safety: every method of every Clock is thread-safe.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weir::time {

// Names one scheduled callback, for Cancel. The default one names none.
struct TimerHandle {
  uint64_t id = 0;
};

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // With `mu` held, waits until `condition` holds (re-evaluated, with `mu`
  // held, whenever `mu` is released by another thread) or until this clock
  // reaches `deadline`. Returns the condition's last value. `mu` is held again
  // on return.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  bool AwaitWithTimeout(absl::Mutex* mu, const absl::Condition& condition, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, condition, Now() + timeout);
  }

  // Returns once this clock has reached `deadline`.
  void SleepUntil(absl::Time deadline);
  void SleepFor(absl::Duration duration) { SleepUntil(Now() + duration); }

  // Runs `callback` once, when this clock has reached `when` (at once, though
  // on the clock's thread, when `when` has passed). Callbacks due at the same
  // time run in the order they were scheduled. A callback may Schedule and
  // Cancel; it must not wait for another timer of the same clock.
  virtual TimerHandle Schedule(absl::Time when, absl::AnyInvocable<void()> callback) = 0;
  // Withdraws a timer: true when it had not started and now never runs; false
  // when it has run, is running, or was withdrawn before.
  virtual bool Cancel(TimerHandle timer) = 0;

  // The wall clock: absl::Now, absl::Mutex's own timed waits, and one timer
  // thread, started at the first Schedule, that lives as long as the process.
  static Clock& Real();
};

}  // namespace weir::time
