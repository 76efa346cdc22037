// Liveness: which of a daemon's long-running loops have come round lately,
// for the systemd watchdog and /healthz. Each loop registers itself, ticks
// once per turn, and unregisters by dropping its handle when it ends. A loop
// that waits for work must wake up to tick at least every
// kLivenessTickBound; one that has not ticked for the daemon's limit is
// stuck (deadlocked, or blocked on something that never returns), and the
// daemon reports itself not alive (docs/operations.md: the watchdog then
// restarts it).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weir {

// The longest a registered loop may go without ticking while it waits.
inline constexpr absl::Duration kLivenessTickBound = absl::Seconds(5);
// The limit for a loop inside a Busy step (storage, RPCs to many peers):
// slow is not stuck, but never returning is.
inline constexpr absl::Duration kLivenessBusyLimit = absl::Minutes(15);

class Liveness {
 public:
  // One registered loop; ticks until destroyed.
  class Loop {
   public:
    ~Loop();
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;
    void Tick() { last_tick_ms_.store(absl::ToUnixMillis(absl::Now()), std::memory_order_relaxed); }

    // While one is open, the loop is doing I/O that is slow but bounded
    // (writing or scanning checkpoints, RPCs to many TaskManagers): it
    // counts as stuck only after kLivenessBusyLimit. Ticks on both ends. A
    // null loop makes it a no-op.
    class Busy {
     public:
      explicit Busy(Loop* loop);
      ~Busy();
      Busy(const Busy&) = delete;
      Busy& operator=(const Busy&) = delete;

     private:
      Loop* const loop_;
    };

   private:
    friend class Liveness;
    Loop(Liveness* owner, std::string name);
    Liveness* const owner_;
    const std::string name_;
    std::atomic<int64_t> last_tick_ms_;
    std::atomic<int> busy_{0};
  };

  Liveness() = default;
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  // Registers a loop named `name` (e.g. "job 7f3a master"), ticked now.
  // The Liveness must outlive it.
  std::unique_ptr<Loop> Register(std::string name);

  // The loops that have not ticked within `limit` of `now` (within
  // kLivenessBusyLimit inside a Busy step), as "<name> (<seconds> s)".
  std::vector<std::string> Stuck(absl::Time now, absl::Duration limit) const;

 private:
  void Unregister(Loop* loop);

  mutable absl::Mutex mu_;
  std::vector<Loop*> loops_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir
