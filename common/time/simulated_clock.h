// SimulatedClock: a Clock whose time moves only when a test calls Advance,
// so that a restart delay of ten minutes or a checkpoint timeout passes in
// no real time, and the code under test never sees time pass on its own.
//
// Advance fires the timers that come due in time order, each on the thread
// that calls Advance, with the clock set to the timer's time (a timer
// scheduled for a time already passed runs at the next Advance, even
// Advance(absl::ZeroDuration())); then it sets the clock to the end, and
// wakes every thread waiting on it so that each re-checks its condition and
// deadline. A timer's callback must not call Advance. A waiter is woken by taking and
// releasing the mutex it waits with (which makes absl::Mutex re-evaluate its
// condition), so Advance must not be called with such a mutex held.
//
// A test that advances time must first know that the code under test waits
// for it, or the advance may come before the wait begins and be taken for
// time that had passed already. WaitUntilParked tells when some threads
// wait on this clock for a deadline still ahead.
//
// Thread-safety: thread-safe; any thread may wait, schedule and advance.
// Concurrent Advance calls are serialized.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/time/clock.h"

namespace weir::time {

class SimulatedClock final : public Clock {
 public:
  // The start is a fixed, unremarkable time (2023-11-14 22:13:20 UTC), so
  // that timestamps in a test's logs and records repeat from run to run.
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000));
  ~SimulatedClock() override;

  SimulatedClock(const SimulatedClock&) = delete;
  SimulatedClock& operator=(const SimulatedClock&) = delete;

  absl::Time Now() const override ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_LOCKS_EXCLUDED(mu_);
  TimerHandle Schedule(absl::Time when, absl::AnyInvocable<void()> callback) override ABSL_LOCKS_EXCLUDED(mu_);
  bool Cancel(TimerHandle timer) override ABSL_LOCKS_EXCLUDED(mu_);

  // Moves the time forward by `duration` (>= 0; a negative one moves nothing),
  // firing due timers and waking waiters as the class comment says.
  void Advance(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mu_, advance_mu_);
  // Advance(to - Now()).
  void AdvanceTo(absl::Time to) ABSL_LOCKS_EXCLUDED(mu_, advance_mu_);

  // Threads now in AwaitWithDeadline or SleepUntil whose deadline lies ahead
  // of the clock. A thread counts until its wait returns, also when its
  // condition holds already and it has not run yet.
  int parked() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits, on real time, until parked() >= count or `real_timeout` passed;
  // returns whether the count was reached.
  bool WaitUntilParked(int count, absl::Duration real_timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  // Timers scheduled and neither run nor cancelled.
  size_t pending_timers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiter {
    absl::Mutex* mu;
    absl::Time deadline;
    // WakeWaiters calls about to take `mu`: the waiter does not return (and
    // its mutex may not go away) until they are done.
    int pinned = 0;
  };

  void SetNowLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Takes and releases every waiter's mutex, so that each re-evaluates its
  // condition against the current time.
  void WakeWaiters() ABSL_LOCKS_EXCLUDED(mu_);
  bool ParkedAtLeast(int count) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex advance_mu_;  // one Advance at a time; taken before mu_
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  // now_, for the conditions of waiters, which absl::Mutex may evaluate on
  // any thread and which must not take mu_.
  std::atomic<int64_t> now_nanos_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Pending timers by (time, id): id order is scheduling order.
  std::map<std::pair<absl::Time, uint64_t>, absl::AnyInvocable<void()>> timers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Time> timer_times_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Waiter> waiters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::time
