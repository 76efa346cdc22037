// Wakeup: a generation counter that a task thread waits on.
//
// Everything that may give a task thread work bumps it: a buffer arriving on
// an input channel, a partition being registered or released, a mail being
// posted, cancellation. The task thread reads the generation, looks for work,
// and if there is none waits until the generation moves on. Reading before
// looking means that a bump between the look and the wait is never lost.
//
// Thread-safety: all methods are thread-safe. Shared (shared_ptr) by the task
// and the listeners it leaves in partitions, which may outlive the task.
#ifndef WEIR_TASKMANAGER_MAILBOX_WAKEUP_H_
#define WEIR_TASKMANAGER_MAILBOX_WAKEUP_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weir::taskmanager {

class Wakeup {
 public:
  // Lock-free: the task loop reads it on every turn.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }

  void Notify() ABSL_LOCKS_EXCLUDED(mu_) {
    // Under the lock, so that a waiter cannot miss it between its check and
    // its sleep.
    absl::MutexLock lock(&mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }

  // Returns when the generation is no longer `seen`, or at `deadline`.
  void WaitForChange(uint64_t seen, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto changed = [this, seen]() { return generation_.load(std::memory_order_acquire) != seen; };
    mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  }

 private:
  mutable absl::Mutex mu_;
  std::atomic<uint64_t> generation_{0};
};

}  // namespace weir::taskmanager

#endif  // WEIR_TASKMANAGER_MAILBOX_WAKEUP_H_
