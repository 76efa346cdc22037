#include "common/time/simulated_clock.h"

#include <algorithm>
#include <vector>

#include "absl/time/clock.h"

namespace weir::time {

SimulatedClock::SimulatedClock(absl::Time start) : now_(start), now_nanos_(absl::ToUnixNanos(start)) {}

SimulatedClock::~SimulatedClock() = default;

absl::Time SimulatedClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void SimulatedClock::SetNowLocked(absl::Time now) {
  now_ = now;
  now_nanos_.store(absl::ToUnixNanos(now));
}

bool SimulatedClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) {
  uint64_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
    waiters_[id] = Waiter{mu, deadline};
  }
  // Evaluated by absl::Mutex with `mu` held, maybe on another thread: it
  // takes no lock, and reads the time from the atomic mirror.
  auto ready = [&] { return condition.Eval() || absl::FromUnixNanos(now_nanos_.load()) >= deadline; };
  mu->Await(absl::Condition(&ready));
  mu_.Lock();
  if (waiters_[id].pinned > 0) {
    // A WakeWaiters call is about to take `mu`: let it, before this wait
    // ends and `mu` may go away.
    mu_.Unlock();
    mu->Unlock();
    mu_.Lock();
    auto unpinned = [this, id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiters_[id].pinned == 0; };
    mu_.Await(absl::Condition(&unpinned));
    waiters_.erase(id);
    mu_.Unlock();
    mu->Lock();
  } else {
    waiters_.erase(id);
    mu_.Unlock();
  }
  return condition.Eval();
}

TimerHandle SimulatedClock::Schedule(absl::Time when, absl::AnyInvocable<void()> callback) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  timers_.emplace(std::make_pair(when, id), std::move(callback));
  timer_times_[id] = when;
  return TimerHandle{id};
}

bool SimulatedClock::Cancel(TimerHandle timer) {
  absl::MutexLock lock(&mu_);
  auto it = timer_times_.find(timer.id);
  if (it == timer_times_.end()) return false;
  timers_.erase(std::make_pair(it->second, timer.id));
  timer_times_.erase(it);
  return true;
}

void SimulatedClock::Advance(absl::Duration duration) {
  absl::MutexLock advancing(&advance_mu_);
  absl::Time target;
  {
    absl::MutexLock lock(&mu_);
    target = now_ + std::max(duration, absl::ZeroDuration());
  }
  while (true) {
    absl::AnyInvocable<void()> callback;
    {
      absl::MutexLock lock(&mu_);
      if (timers_.empty() || timers_.begin()->first.first > target) break;
      auto node = timers_.extract(timers_.begin());
      timer_times_.erase(node.key().second);
      SetNowLocked(std::max(now_, node.key().first));
      callback = std::move(node.mapped());
    }
    WakeWaiters();
    callback();
  }
  {
    absl::MutexLock lock(&mu_);
    SetNowLocked(target);
  }
  WakeWaiters();
}

void SimulatedClock::AdvanceTo(absl::Time to) { Advance(to - Now()); }

void SimulatedClock::WakeWaiters() {
  // Pinned, so that no waiter returns (and its mutex goes away) until its
  // mutex was taken here.
  std::vector<std::pair<uint64_t, absl::Mutex*>> pinned;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, waiter] : waiters_) {
      ++waiter.pinned;
      pinned.emplace_back(id, waiter.mu);
    }
  }
  for (const auto& [id, mu] : pinned) {
    mu->Lock();
    mu->Unlock();
  }
  absl::MutexLock lock(&mu_);
  for (const auto& [id, mu] : pinned) --waiters_[id].pinned;
}

bool SimulatedClock::ParkedAtLeast(int count) const {
  int parked = 0;
  for (const auto& [id, waiter] : waiters_) parked += waiter.deadline > now_ ? 1 : 0;
  return parked >= count;
}

int SimulatedClock::parked() const {
  absl::MutexLock lock(&mu_);
  int parked = 0;
  for (const auto& [id, waiter] : waiters_) parked += waiter.deadline > now_ ? 1 : 0;
  return parked;
}

bool SimulatedClock::WaitUntilParked(int count, absl::Duration real_timeout) const {
  absl::MutexLock lock(&mu_);
  auto reached = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ParkedAtLeast(count); };
  return mu_.AwaitWithTimeout(absl::Condition(&reached), real_timeout);
}

size_t SimulatedClock::pending_timers() const {
  absl::MutexLock lock(&mu_);
  return timers_.size();
}

}  // namespace weir::time
