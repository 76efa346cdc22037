#include "common/process/liveness.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weir {

Liveness::Loop::Loop(Liveness* owner, std::string name)
    : owner_(owner), name_(std::move(name)), last_tick_ms_(absl::ToUnixMillis(absl::Now())) {}

Liveness::Loop::~Loop() { owner_->Unregister(this); }

Liveness::Loop::Busy::Busy(Loop* loop) : loop_(loop) {
  if (loop_ == nullptr) return;
  loop_->Tick();
  loop_->busy_.fetch_add(1);
}

Liveness::Loop::Busy::~Busy() {
  if (loop_ == nullptr) return;
  loop_->busy_.fetch_sub(1);
  loop_->Tick();
}

std::unique_ptr<Liveness::Loop> Liveness::Register(std::string name) {
  std::unique_ptr<Loop> loop(new Loop(this, std::move(name)));
  absl::MutexLock lock(&mu_);
  loops_.push_back(loop.get());
  return loop;
}

void Liveness::Unregister(Loop* loop) {
  absl::MutexLock lock(&mu_);
  loops_.erase(std::remove(loops_.begin(), loops_.end(), loop), loops_.end());
}

std::vector<std::string> Liveness::Stuck(absl::Time now, absl::Duration limit) const {
  std::vector<std::string> stuck;
  const int64_t now_ms = absl::ToUnixMillis(now);
  absl::MutexLock lock(&mu_);
  for (const Loop* loop : loops_) {
    const int64_t silent_ms = now_ms - loop->last_tick_ms_.load(std::memory_order_relaxed);
    const absl::Duration loop_limit = loop->busy_.load() > 0 ? std::max(limit, kLivenessBusyLimit) : limit;
    if (silent_ms >= absl::ToInt64Milliseconds(loop_limit)) {
      stuck.push_back(absl::StrCat(loop->name_, " (", silent_ms / 1000, " s)"));
    }
  }
  return stuck;
}

}  // namespace weir
