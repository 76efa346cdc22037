// SnapshotUploader: the TaskManager's thread for the asynchronous part of
// task snapshots — encoding, writing the file into the checkpoint directory,
// and sending the acknowledgement — so that a task thread only takes the
// short synchronous part and goes back to its records.
//
// Work runs in submission order on one thread. Whenever the queue runs
// empty after some work, the idle callback (if any) runs on that thread: a
// place to send in one go what the work items left behind. Stop drops work
// not yet started and joins.
//
// Thread-safety: Submit and Stop from any thread.
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace weir::taskmanager {

class SnapshotUploader {
 public:
  // `on_idle`: see above; may be null.
  explicit SnapshotUploader(std::function<void()> on_idle = nullptr);
  ~SnapshotUploader();  // Stop()

  SnapshotUploader(const SnapshotUploader&) = delete;
  SnapshotUploader& operator=(const SnapshotUploader&) = delete;

  // Queues `work`; false (and not run) once stopped.
  bool Submit(std::function<void()> work) ABSL_LOCKS_EXCLUDED(mu_);
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const std::function<void()> on_idle_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace weir::taskmanager
