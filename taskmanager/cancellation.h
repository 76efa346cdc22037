// Cancellation: a one-way signal that a task's work should stop, for work
// that waits on something other than the task's own wakeup (a download from
// the JobManager, another task's load of the same job binary). Whoever
// waits registers a callback that ends its wait (gRPC's TryCancel, a touch
// of the mutex its condition is evaluated under); Cancel runs them.
//
// Thread-safety: thread-safe. Callbacks run on the thread that calls Cancel
// (or on the registering thread when already cancelled), under an internal
// lock: they must be short and must not register or drop registrations.
// Register before taking a lock the callback takes, and drop the
// registration after releasing it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace weir::taskmanager {

class Cancellation {
 public:
  // Removes its callback when destroyed (after which it never runs).
  class Registration {
   public:
    Registration() = default;
    Registration(Registration&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), id_(other.id_) {}
    Registration& operator=(Registration&& other) noexcept {
      if (this != &other) {
        Reset();
        owner_ = std::exchange(other.owner_, nullptr);
        id_ = other.id_;
      }
      return *this;
    }
    ~Registration() { Reset(); }

    void Reset() {
      if (owner_ == nullptr) return;
      absl::MutexLock lock(&owner_->mu_);
      owner_->callbacks_.erase(id_);
      owner_ = nullptr;
    }

   private:
    friend class Cancellation;
    Registration(Cancellation* owner, uint64_t id) : owner_(owner), id_(id) {}
    Cancellation* owner_ = nullptr;
    uint64_t id_ = 0;
  };

  Cancellation() = default;
  Cancellation(const Cancellation&) = delete;
  Cancellation& operator=(const Cancellation&) = delete;

  // Runs every registered callback once; later calls do nothing.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load()) return;
    cancelled_.store(true);
    for (auto& [id, callback] : callbacks_) callback();
    callbacks_.clear();
  }

  // Takes no lock: a condition evaluated under another mutex may ask.
  bool cancelled() const { return cancelled_.load(); }

  // Runs `callback` on Cancel, or at once when cancelled already, unless
  // the returned registration was dropped first.
  [[nodiscard]] Registration OnCancel(std::function<void()> callback) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (cancelled_.load()) {
      callback();
      return Registration();
    }
    const uint64_t id = next_id_++;
    callbacks_.emplace(id, std::move(callback));
    return Registration(this, id);
  }

 private:
  absl::Mutex mu_;
  // Written under mu_ (before the callbacks run), read anywhere.
  std::atomic<bool> cancelled_{false};
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::function<void()>> callbacks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager
