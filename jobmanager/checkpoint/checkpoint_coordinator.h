// CheckpointCoordinator: the JobManager's side of one job's checkpoints
// (design.md, "The checkpoint protocol"). It triggers checkpoint n at the
// source tasks on a timer, collects every task's acknowledgement, writes the
// checkpoint's _metadata (only then is n complete), tells the tasks n's fate,
// expires checkpoints that take too long, and keeps the newest
// state.checkpoints.num-retained complete checkpoints on disk.
//
// The JobMaster owns one per job and feeds it: the tasks of each execution
// attempt (SetTasks), acknowledgements and declines from the JobMasterService,
// and finished tasks. It reaches the tasks through a CheckpointTaskGateway;
// its decisions about the job (fail it: too many failed checkpoints) go
// there too, and the JobMaster posts them to its executor.
//
// Thread-safety: all public methods are thread-safe. The coordinator owns one
// thread (started by Start) that makes every gateway call and every file
// operation (creating checkpoint directories, writing _metadata, discarding);
// the public methods only update state under the lock and hand work to it.
// Gateway calls are made one at a time, never with the coordinator's lock
// held, so a gateway may call back into the coordinator (except TriggerNow,
// which would wait for its own thread). Do not call Stop, Suspend or SetTasks
// while holding a lock that a gateway call takes.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "common/process/liveness.h"
#include "common/time/clock.h"
#include "jobmanager/checkpoint/checkpoint_storage.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::jobmanager::checkpoint {

// How a job checkpoints. None of these change while the job runs.
struct CheckpointCoordinatorOptions {
  // execution.checkpointing.interval: time from one periodic trigger to the
  // next. Default: infinite, i.e. no periodic checkpoints (TriggerNow only).
  absl::Duration interval = absl::InfiniteDuration();
  // Once every source task finished, no checkpoint is triggered any more,
  // and the tasks still running wait only for the completion of the last
  // one (their final checkpoint). If that notice is lost (a TaskManager's
  // connection broke at that moment), it is sent again this often while
  // any task of the attempt has not finished. Tasks take a repeated notice
  // as the first (commits are idempotent). Default 10 s.
  absl::Duration final_notice_repeat = absl::Seconds(10);
  // execution.checkpointing.timeout: a checkpoint not complete this long
  // after its trigger is aborted. Default 10 min.
  absl::Duration timeout = absl::Minutes(10);
  // execution.checkpointing.min-pause: minimum time from the end (completion
  // or abort) of one checkpoint to the periodic trigger of the next.
  // Default 0.
  absl::Duration min_pause = absl::ZeroDuration();
  // execution.checkpointing.max-concurrent-checkpoints: checkpoints in
  // progress at once. Default 1.
  int max_concurrent = 1;
  // execution.checkpointing.mode, recorded in the metadata.
  v1::CheckpointingMode mode = v1::EXACTLY_ONCE;
  // execution.checkpointing.tolerable-failed-checkpoints: -1 (default)
  // tolerates any number; N >= 0 fails the job when more than N consecutive
  // checkpoints failed.
  int tolerable_failed = -1;
  // state.checkpoints.num-retained: complete checkpoints kept on disk.
  // Default 1.
  int num_retained = 1;
  // pipeline.max-parallelism of the job (its number of key groups), recorded
  // in the metadata.
  int max_parallelism = 0;
  // VertexSignature of every operator, by operator id, recorded in the
  // metadata.
  std::map<std::string, std::string> operator_signatures;
  // Where the coordinator's thread shows it is alive (the JobManager's
  // watchdog); null: nowhere.
  Liveness* liveness = nullptr;
  // Whether this JobManager surely still leads (its lease is fresh); checked
  // before each trigger and completion, so that a process resumed after a
  // freeze acts on nothing before Revoke comes. Null: always.
  std::function<bool()> leading;
  // The time triggers, timeouts and the history's timestamps go by; null:
  // time::Clock::Real(). Must outlive the coordinator.
  time::Clock* clock = nullptr;

  // kInvalidArgument naming the key of the first bad value.
  absl::Status Validate() const;
};

// How the coordinator reaches the tasks; implemented by the JobMaster. Every
// call comes from the coordinator's thread, one at a time, without the
// coordinator's lock held. Calls should not block for long (a blocked call
// delays completions and expiries of this job's checkpoints).
class CheckpointTaskGateway {
 public:
  virtual ~CheckpointTaskGateway() = default;
  // Asks every source task in `task_ids` (of `attempt`) to start checkpoint
  // `id`, and returns once each was asked. An error, whose message names a
  // task that could not be asked and why, aborts the checkpoint. `stop`: the
  // checkpoint of a stop-with-savepoint; after its barrier the source emits
  // nothing until FinishStop (or until the checkpoint is aborted, which
  // resumes it).
  virtual absl::Status TriggerCheckpoints(int attempt, const std::vector<std::string>& task_ids, int64_t id,
                                          int64_t timestamp_unix_ms, bool stop) = 0;
  // Tells every task of `attempt` the checkpoint's fate (completed or aborted
  // with reason). Fire and forget.
  virtual void NotifyCheckpoint(int attempt, int64_t id, bool completed, const std::string& reason) = 0;
  // Stop-with-savepoint checkpoint `id` completed and every task was told:
  // the source tasks of `attempt` end their input (`end_input`, the job
  // then finishes) or resume emitting (the savepoint could not be written).
  virtual void FinishStop(int attempt, int64_t id, bool end_input) = 0;
  // Too many consecutive failed checkpoints (tolerable_failed exceeded): the
  // job must fail with `reason`.
  virtual void FailJob(const std::string& reason) = 0;
};

enum class CheckpointStatus { kInProgress, kCompleted, kFailed };
// "IN_PROGRESS", "COMPLETED", "FAILED".
absl::string_view CheckpointStatusName(CheckpointStatus status);

// One checkpoint as History reports it.
struct CheckpointRecord {
  int64_t id = 0;
  int attempt = 0;
  CheckpointStatus status = CheckpointStatus::kInProgress;
  absl::Time trigger_time;
  // Trigger to completion or abort; so far, while in progress.
  absl::Duration duration;
  // Sum of the acknowledged tasks' file sizes.
  int64_t size_bytes = 0;
  int64_t longest_alignment_ms = 0;
  // The longest synchronous (task thread) and asynchronous (upload) part of
  // any task's snapshot.
  int64_t longest_sync_ms = 0;
  int64_t longest_async_ms = 0;
  int64_t longest_pre_barrier_ms = 0;
  // The longest time from the trigger to a task's first barrier.
  int64_t longest_start_delay_ms = 0;
  // Checking the task files and writing _metadata, after the last ack.
  int64_t metadata_ms = 0;
  std::string failure_reason;
  int acknowledged_tasks = 0;
  int expected_tasks = 0;
  // The coordinator's own time: the gateway calls that asked every source
  // task to start it, and those that told the tasks it completed; unset
  // until measured.
  std::optional<absl::Duration> trigger_fanout;
  std::optional<absl::Duration> notify_fanout;
  // CPU time of the JobManager's threads on this checkpoint: the trigger,
  // every acknowledgement, the _metadata write and the notification.
  absl::Duration coordinator_cpu;
};

class CheckpointCoordinator {
 public:
  // How many checkpoints History remembers.
  static constexpr size_t kHistorySize = 50;

  // `options` must be valid (Validate). Checkpoint ids start after the
  // largest chk-<n> in `storage`, so that ids grow across JobManager
  // restarts. `gateway` must outlive the coordinator.
  CheckpointCoordinator(std::string job_id, CheckpointCoordinatorOptions options, CheckpointStorage storage,
                        CheckpointTaskGateway* gateway);
  // Stops.
  ~CheckpointCoordinator();

  CheckpointCoordinator(const CheckpointCoordinator&) = delete;
  CheckpointCoordinator& operator=(const CheckpointCoordinator&) = delete;

  // Starts the coordinator's thread. Once only.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Aborts every pending checkpoint without notifying the tasks (discarding
  // their directories) and joins the thread; a _metadata write in progress
  // finishes first. Idempotent; the coordinator cannot be started again.
  // Called from a gateway call, it only tells the thread to stop.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_, join_mu_);
  // This JobManager no longer leads. From the return on, the coordinator
  // triggers nothing, ignores acknowledgements and declines, completes no
  // checkpoint, and tells the gateway nothing; it writes and deletes no file
  // (pending checkpoints keep their directories, for the next leader's
  // retention); a _metadata write already in progress finishes first (that
  // checkpoint is complete, and no task is told), and so does a trigger
  // already past its check (its directory and its fan-out; a revocation
  // while the directory is made stops it before the fan-out). The thread
  // ends; Stop
  // still joins it. Idempotent; not from a gateway call.
  void Revoke() ABSL_LOCKS_EXCLUDED(mu_);

  // The tasks of execution attempt `attempt` (every source task id is also in
  // `all_task_ids`). Aborts every pending checkpoint ("job restarting";
  // tasks not notified, not counted as failures) after waiting for a
  // _metadata write in progress. The periodic interval counts from here.
  // Until the first call nothing is triggered.
  void SetTasks(int attempt, std::vector<std::string> source_task_ids, std::vector<std::string> all_task_ids)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Stops triggering (e.g. the job is failing over) until Resume, and aborts
  // every pending checkpoint like SetTasks. When Suspend returns, no _metadata
  // write is in progress and none will start: the set of complete checkpoints
  // on disk is stable, and CheckpointStorage::LatestValid can choose the one
  // to restore.
  void Suspend() ABSL_LOCKS_EXCLUDED(mu_);
  void Resume() ABSL_LOCKS_EXCLUDED(mu_);

  // The id of the next checkpoint is at least `id` (ids never go down: a
  // smaller value is ignored). The JobMaster sets it to restored id + 1.
  void SetNextCheckpointId(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Triggers one checkpoint now, regardless of interval and min_pause, and
  // returns its id once its source tasks were asked (its outcome is in
  // History and reaches the tasks through the gateway). kFailedPrecondition
  // when not started, no tasks are set, suspended, or every source task finished;
  // kResourceExhausted when max_concurrent checkpoints are in progress;
  // kCancelled when stopped while waiting. Blocks until the coordinator's
  // thread has handled it: never call it from a gateway call.
  //
  // `stop`: the checkpoint of a stop-with-savepoint (Flink's stop): sources
  // stop emitting after its barrier, and no other checkpoint is triggered
  // until it is aborted or FinishStop(id, false) resumes the job.
  absl::StatusOr<int64_t> TriggerNow(bool stop = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits, on the clock, until fewer than max_concurrent checkpoints are in
  // progress (TriggerNow would not say kResourceExhausted), the coordinator
  // stops, or `deadline`; whether there is room.
  bool AwaitCapacity(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits, on the clock, until checkpoint `id` completed or failed, the
  // coordinator stops, or `deadline`; returns its record then (nullopt when
  // History no longer holds it).
  std::optional<CheckpointRecord> AwaitEnd(int64_t id, absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // Triggers a checkpoint as soon as one may be (none pending beyond
  // max_concurrent), without waiting for the interval: the final checkpoint
  // once every source reached the end of its input. Does not block.
  void RequestTriggerSoon() ABSL_LOCKS_EXCLUDED(mu_);

  // After stop checkpoint `id` completed: tells the source tasks, on the
  // coordinator's thread and so after the tasks were told of the completion,
  // to end their input (`end_input`) or to resume.
  void FinishStop(int64_t id, bool end_input) ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps checkpoint `id`'s directory from being discarded (a savepoint is
  // being copied out of it) until Unpin.
  void Pin(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void Unpin(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // A task's acknowledgement or decline (from the JobMasterService).
  // Messages of another job or attempt, for a checkpoint that is not pending,
  // or from a task the checkpoint does not wait for are ignored (debug log).
  // An acknowledgement whose state handle names an unusable file aborts the
  // checkpoint; a decline aborts it with the task and its reason.
  void OnAcknowledge(const v1::AcknowledgeCheckpointRequest& ack) ABSL_LOCKS_EXCLUDED(mu_);
  // The same for a TaskManager's batch (AcknowledgeCheckpoints), under one
  // lock.
  void OnAcknowledgeBatch(absl::Span<const v1::AcknowledgeCheckpointRequest* const> acks) ABSL_LOCKS_EXCLUDED(mu_);
  void OnDecline(const v1::DeclineCheckpointRequest& decline) ABSL_LOCKS_EXCLUDED(mu_);

  // Task `task_id` of `attempt` finished (bounded input), or was deployed as
  // finished by a restore. Checkpoints go on without it: it is no longer
  // triggered (a source) or waited for, and every checkpoint from now on,
  // pending ones included, records it as finished (a TaskStateHandle with
  // `finished`, no file, the vertices, operator ids, subtask and
  // parallelism of `identity`), so that a restore does not run it again. Once every source
  // finished, nothing more is triggered. Ignored for another attempt.
  void OnTaskFinished(int attempt, const std::string& task_id, v1::TaskStateHandle identity = {})
      ABSL_LOCKS_EXCLUDED(mu_);

  // The last kHistorySize checkpoints, newest first.
  std::vector<CheckpointRecord> History() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t completed_count() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t failed_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // The newest checkpoint this coordinator completed (not one found on disk).
  std::optional<int64_t> latest_completed_id() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& job_id() const { return job_id_; }
  const CheckpointStorage& storage() const { return storage_; }

 private:
  enum class Phase {
    kAwaitingAcks,      // triggered; some tasks have not acknowledged
    kAllAcknowledged,   // queued for the thread to write _metadata
    kWritingMetadata,   // the thread is writing _metadata (cannot be aborted)
  };

  struct Pending {
    int64_t id = 0;
    int attempt = 0;
    absl::Time trigger_time;
    int64_t trigger_unix_ms = 0;
    Phase phase = Phase::kAwaitingAcks;
    // In the order SetTasks gave; the metadata lists handles in this order.
    std::vector<std::string> expected;
    absl::flat_hash_set<std::string> awaiting;
    absl::flat_hash_map<std::string, v1::TaskStateHandle> handles;
    int64_t size_bytes = 0;
    int64_t reused_bytes = 0;  // shared files referred to, not written again
    int64_t longest_alignment_ms = 0;
    int64_t longest_sync_ms = 0;
    int64_t longest_async_ms = 0;
    int64_t longest_pre_barrier_ms = 0;
    int64_t longest_start_delay_ms = 0;
    bool stop = false;
  };

  // What an abort leaves for the thread to do: log, discard the directory,
  // notify the tasks, maybe fail the job.
  struct AbortAction {
    int64_t id = 0;
    int attempt = 0;
    std::string reason;
    bool notify = true;
    bool discard = true;
    std::optional<std::string> fail_job_reason;
  };

  // A TriggerNow call waiting for the thread.
  struct ManualTrigger {
    bool stop = false;
    bool done = false;
    absl::StatusOr<int64_t> result = absl::UnknownError("not handled");
  };

  // A checkpoint recorded as pending, for the thread to trigger.
  struct TriggerPlan {
    int64_t id = 0;
    int attempt = 0;
    std::vector<std::string> sources;
    int64_t timestamp_unix_ms = 0;
    bool stop = false;
    std::shared_ptr<ManualTrigger> manual;
  };

  // A FinishStop call for the thread.
  struct StopFinish {
    int attempt = 0;
    int64_t id = 0;
    bool end_input = false;
  };

  enum class AbortKind {
    kFailure,     // notify the tasks, count toward tolerable_failed
    kNotCounted,  // notify the tasks, not a failure (task finished, subsumed)
    kSilent,      // neither (job restarting, coordinator stopped)
  };

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool NoMetadataWriteLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // No _metadata write and no trigger (its directory, its fan-out) under way.
  bool NothingUnderWayLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // options_.leading says this JobManager surely still leads.
  bool Leads() const { return !options_.leading || options_.leading(); }
  absl::Time NextWakeupLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // When the next periodic trigger is due (interval and min_pause).
  absl::Time NextPeriodicTriggerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when a checkpoint may be triggered now, else why not.
  // The last "completed" notice sent in this attempt: its checkpoint and
  // when (see final_notice_repeat).
  struct CompletionNotice {
    int attempt = 0;
    int64_t id = 0;
    absl::Time sent = absl::InfinitePast();
  };
  // The notice to send again now (final_notice_repeat), if any.
  std::optional<CompletionNotice> RepeatNoticeLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllSourcesFinishedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckCanTriggerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reserves the next id and records it as pending and in the history.
  TriggerPlan PlanTriggerLocked(absl::Time now, std::shared_ptr<ManualTrigger> manual)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecuteTrigger(TriggerPlan plan) ABSL_LOCKS_EXCLUDED(mu_);
  void CompleteCheckpoint(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void RunAbortAction(const AbortAction& action, bool stopping) ABSL_LOCKS_EXCLUDED(mu_);
  // Discards checkpoints older than `newest_completed` beyond num_retained,
  // then the shared files no complete checkpoint refers to.
  void Retain(int64_t newest_completed) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends pending checkpoint `id` as failed and queues its AbortAction
  // (which removes its directory unless !discard); a no-op if it is not
  // pending.
  void AbortLocked(int64_t id, const std::string& reason, AbortKind kind, bool discard = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until no _metadata write is in progress, then aborts every pending
  // checkpoint; returns with the lock held and nothing pending.
  void AbortAllLocked(const std::string& reason, AbortKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  CheckpointRecord* RecordLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes in one acknowledgement (OnAcknowledge's rules); false when it was
  // ignored. The caller updates the checkpoint's record.
  bool AcknowledgeLocked(const v1::AcknowledgeCheckpointRequest& ack) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The figures the acknowledgements so far give `pending`'s record.
  static void CopyFigures(const Pending& pending, CheckpointRecord* record);

  const std::string job_id_;
  const CheckpointCoordinatorOptions options_;
  time::Clock& clock_;  // options_.clock or the real one
  CheckpointStorage storage_;
  CheckpointTaskGateway* const gateway_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Revoke was called (implies stopping_).
  bool revoked_ ABSL_GUARDED_BY(mu_) = false;
  // Set by calls that change when the thread must act next.
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  // RequestTriggerSoon was called and no checkpoint was triggered since.
  bool trigger_soon_ ABSL_GUARDED_BY(mu_) = false;
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_metadata_ ABSL_GUARDED_BY(mu_) = false;
  // Triggers past their revocation check and not yet fanned out: Revoke
  // waits for them, so that none starts after it returned.
  int triggers_under_way_ ABSL_GUARDED_BY(mu_) = 0;

  bool tasks_set_ ABSL_GUARDED_BY(mu_) = false;
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> sources_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> all_tasks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> all_task_set_ ABSL_GUARDED_BY(mu_);
  // The finished tasks, and what later checkpoints record for each.
  absl::flat_hash_map<std::string, v1::TaskStateHandle> finished_markers_ ABSL_GUARDED_BY(mu_);
  // A stop-with-savepoint checkpoint of this attempt that was triggered and
  // neither aborted nor resumed: nothing else is triggered.
  std::optional<int64_t> stop_checkpoint_ ABSL_GUARDED_BY(mu_);

  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::set<int64_t> pinned_ ABSL_GUARDED_BY(mu_);
  absl::Time last_trigger_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time last_end_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;

  // Work for the thread.
  std::vector<AbortAction> actions_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> ready_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<ManualTrigger>> manual_triggers_ ABSL_GUARDED_BY(mu_);
  std::vector<StopFinish> stop_finishes_ ABSL_GUARDED_BY(mu_);

  // Newest first, at most kHistorySize.
  std::deque<CheckpointRecord> history_ ABSL_GUARDED_BY(mu_);
  int64_t completed_count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::optional<int64_t> latest_completed_ ABSL_GUARDED_BY(mu_);
  // The last "completed" notice sent in this attempt.
  std::optional<CompletionNotice> last_notice_ ABSL_GUARDED_BY(mu_);

  // Serializes joining the thread (Stop may be called from several threads).
  absl::Mutex join_mu_;
  std::thread thread_;
};

}  // namespace weir::jobmanager::checkpoint
