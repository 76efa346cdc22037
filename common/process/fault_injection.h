// Fault injection for tests: a daemon started with
//   -Dtest.fault-injection.point=<point> [-Dtest.fault-injection.checkpoint=N]
// kills itself with SIGKILL the first time it reaches <point> for a
// checkpoint id >= N (default 1), so that a test can crash it exactly
// between two steps of the checkpoint protocol; one point drops a message
// instead. Off by default; a daemon that has it on says so loudly at start.
// Points:
//
//   taskmanager-after-pre-commit     a task flushed and pre-committed its
//                                    sinks for the barrier, before it
//                                    forwards the barrier and snapshots
//   taskmanager-before-commit        the TaskManager was told a checkpoint
//                                    completed, before any task (sink) hears
//   jobmanager-before-notify         the JobManager wrote a checkpoint's
//                                    metadata (it is complete), before it
//                                    tells any task
//   taskmanager-mid-write-ahead-batch  a write-ahead sink wrote part of a
//                                    completed checkpoint's batch, before
//                                    the rest
//   taskmanager-drop-notify          no kill: the TaskManager drops every
//                                    "checkpoint completed" notification
//                                    for checkpoint N and later instead of
//                                    passing it to its tasks, so sinks keep
//                                    those checkpoints' transactions
//                                    pre-committed (ShouldDrop)
//   jobmanager-stop-before-store-write  no kill: the JobManager stops
//                                    itself (SIGSTOP) once, in its first
//                                    job-store write of an attempt under an
//                                    election, after it read the record and
//                                    before the fenced write goes to etcd,
//                                    so that a test can resume it (SIGCONT)
//                                    once a standby leads (MaybeStop)
//
// Thread-safety: Configure once at start, before other threads call
// MaybeCrash or ShouldDrop; those from any thread.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "common/config/configuration.h"

namespace weir::fault {

enum class Point {
  kNone,
  kTaskManagerAfterPreCommit,
  kTaskManagerBeforeCommit,
  kJobManagerBeforeNotify,
  kTaskManagerMidWriteAheadBatch,
  kTaskManagerDropNotify,
  kJobManagerStopBeforeStoreWrite,
};

// Reads the test.fault-injection.* keys; logs a warning when a point is set.
absl::Status Configure(const config::Configuration& config, const char* daemon);

// SIGKILLs this process when `at` is the configured point and
// `checkpoint_id` >= the configured checkpoint.
void MaybeCrash(Point at, int64_t checkpoint_id);

// Stops this process (SIGSTOP) the first time it reaches `at` when `at` is
// the configured point; it goes on when it is sent SIGCONT.
void MaybeStop(Point at);

// Whether the message at `at` for `checkpoint_id` is to be dropped: `at` is
// the configured point and `checkpoint_id` >= the configured checkpoint.
// Logs "FAULT INJECTION: dropping the completion of checkpoint <n>" when so.
bool ShouldDrop(Point at, int64_t checkpoint_id);

}  // namespace weir::fault
