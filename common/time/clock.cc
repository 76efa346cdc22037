#include "common/time/clock.h"

#include <map>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/clock.h"

namespace weir::time {
namespace {

// The wall clock. Timers run on one thread, started at the first Schedule,
// in order of their time; a callback that takes long delays the ones after it.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }

  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& condition, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return mu->AwaitWithDeadline(condition, deadline);
  }

  TimerHandle Schedule(absl::Time when, absl::AnyInvocable<void()> callback) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (!started_) {
      started_ = true;
      std::thread([this] { RunTimers(); }).detach();  // lives as long as the process, as this clock does
    }
    const uint64_t id = next_id_++;
    timers_.emplace(std::make_pair(when, id), std::move(callback));
    timer_times_[id] = when;
    changed_ = true;
    return TimerHandle{id};
  }

  bool Cancel(TimerHandle timer) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = timer_times_.find(timer.id);
    if (it == timer_times_.end()) return false;
    timers_.erase(std::make_pair(it->second, timer.id));
    timer_times_.erase(it);
    changed_ = true;
    return true;
  }

 private:
  void RunTimers() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (true) {
      const absl::Time next = timers_.empty() ? absl::InfiniteFuture() : timers_.begin()->first.first;
      mu_.AwaitWithDeadline(absl::Condition(&changed_), next);
      changed_ = false;
      if (timers_.empty() || timers_.begin()->first.first > absl::Now()) continue;
      auto node = timers_.extract(timers_.begin());
      timer_times_.erase(node.key().second);
      absl::AnyInvocable<void()> callback = std::move(node.mapped());
      mu_.Unlock();
      callback();
      mu_.Lock();
    }
  }

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // a timer was added or removed
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::pair<absl::Time, uint64_t>, absl::AnyInvocable<void()>> timers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, absl::Time> timer_times_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void Clock::SleepUntil(absl::Time deadline) {
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  auto never = [] { return false; };
  AwaitWithDeadline(&mu, absl::Condition(&never), deadline);
}

Clock& Clock::Real() {
  static RealClock* const clock = new RealClock();
  return *clock;
}

}  // namespace weir::time
