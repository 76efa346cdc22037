// SerialExecutor: one named thread that runs the tasks posted to it one at a
// time, in the order they were posted, so that whatever state only its tasks
// touch needs no lock. Timers are the Clock's: PostAt has the clock post a
// task when it reaches a time (on a SimulatedClock, when the test advances
// it).
//
// The executor is a capability for clang's thread-safety analysis: state
// that only its tasks touch is ABSL_GUARDED_BY(executor), and a task opens
// with AssertInExecutor(), which aborts in debug builds when called from any
// other thread and tells the analysis the task runs on the executor.
//
// Between tasks the thread waits on the clock (a SimulatedClock counts it as
// parked) and wakes at least every `idle_tick` of it to show, through
// Liveness, that it is alive.
//
// Lifecycle: Start once; Shutdown (from any thread, the executor's own
// included) lets the task in hand finish and then drops or runs what is
// queued (`drain`), withdraws the pending timers and refuses later posts;
// Join (not from the executor) waits for the thread to end. The destructor
// does both.
//
// Thread-safety: every method is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/process/liveness.h"
#include "common/time/clock.h"

namespace weir {

class ABSL_LOCKABLE SerialExecutor {
 public:
  // `name` names the thread in logs and in Liveness (null: not watched).
  // `clock` must outlive the executor.
  SerialExecutor(std::string name, time::Clock& clock, Liveness* liveness = nullptr,
                 absl::Duration idle_tick = absl::Seconds(1));
  ~SerialExecutor();

  SerialExecutor(const SerialExecutor&) = delete;
  SerialExecutor& operator=(const SerialExecutor&) = delete;

  void Start();

  // Queues `task`; false (and `task` is destroyed) after Shutdown.
  bool Post(absl::AnyInvocable<void()> task);
  // Posts `task`, and returns once it ran (true) or was dropped by a
  // Shutdown (false), or after `max_wait` of real time (false; the task
  // stays queued). Not from the executor itself.
  bool PostAndWait(absl::AnyInvocable<void()> task, absl::Duration max_wait = absl::InfiniteDuration());
  // Posts `task` once the clock reaches `when`. The timer is withdrawn by
  // CancelTimer or Shutdown.
  time::TimerHandle PostAt(absl::Time when, absl::AnyInvocable<void()> task);
  // True when the timer had not fired yet and now never posts its task.
  bool CancelTimer(time::TimerHandle timer);

  // See the class comment. `drain`: the queued tasks still run (no new ones
  // are taken); else they are dropped.
  void Shutdown(bool drain = false);
  void Join();

  bool InExecutor() const { return std::this_thread::get_id() == thread_id_.load(); }
  // Aborts (debug builds) unless called from a task of this executor.
  void AssertInExecutor() const ABSL_ASSERT_EXCLUSIVE_LOCK();

  // The thread's Liveness registration, for Busy steps of a task (null
  // without Liveness). Executor only.
  Liveness::Loop* liveness_loop() const { return live_.get(); }

  const std::string& name() const { return name_; }

 private:
  // What timers share with the executor, so that a timer that fires after
  // the executor went finds it shut down instead of gone.
  struct Queue {
    absl::Mutex mu;
    std::deque<absl::AnyInvocable<void()>> tasks ABSL_GUARDED_BY(mu);
    bool shutdown ABSL_GUARDED_BY(mu) = false;
    bool drain ABSL_GUARDED_BY(mu) = false;
    absl::flat_hash_set<uint64_t> timers ABSL_GUARDED_BY(mu);
    bool Push(absl::AnyInvocable<void()> task) ABSL_LOCKS_EXCLUDED(mu);
  };

  void Run();

  const std::string name_;
  time::Clock& clock_;
  Liveness* const liveness_;
  const absl::Duration idle_tick_;
  const std::shared_ptr<Queue> queue_ = std::make_shared<Queue>();
  std::atomic<std::thread::id> thread_id_{};
  std::unique_ptr<Liveness::Loop> live_;  // the thread's own
  absl::Mutex join_mu_;
  std::thread thread_ ABSL_GUARDED_BY(join_mu_);
};

}  // namespace weir
