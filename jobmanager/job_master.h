// JobMaster: runs one job — deploys each execution attempt's tasks to the
// slots it was given, follows their states, restarts the job after a failure
// as its RestartStrategy allows (from the newest complete checkpoint), and
// ends it FINISHED (every task finished), FAILED (a failure the strategy does
// not restart), or CANCELED (weir cancel).
//
// An attempt is RUNNING once every task reports RUNNING; only then does the
// job's CheckpointCoordinator trigger checkpoints. A failure (a task failed,
// its TaskManager was lost, a deployment failed) cancels the attempt's tasks
// on every TaskManager it used, waits for them (up to
// task.cancellation.timeout), gives back the slots, waits the restart delay,
// asks for slots anew (up to slot.request.timeout, e.g. while a replacement
// TaskManager starts), picks the newest checkpoint that is complete and
// intact (falling back to older ones and saying why) and deploys the next
// attempt with each task's state handle.
//
// Everything it sends to TaskManagers goes through its TaskManagerGateway
// (gRPC in the daemon, in memory in tests).
//
// Its decisions are made on one SerialExecutor, its own: every input is an
// event posted there (a task's state, a TaskManager's report or loss, a
// deployment's answer, a client's cancellation, slots offered, a timer of
// the clock: restart delay, deployment, cancellation and slot request
// timeouts, leadership revoked), and the attempt's phase (deploying,
// running, cancelling, waiting to restart, waiting for slots) decides what
// each event does (docs/architecture.md, "From `weir submit` to running
// tasks", step 5, has the table).
// Deployments and cancellations travel on a second thread of its own, so
// that the executor never waits for a TaskManager; their answers come back
// as events.
//
// Thread-safety: thread-safe. The On* methods, Cancel and RevokeLeadership
// post to the executor; OnTaskStateUpdate and Cancel return once it took
// the event (so that the status shows it), the others at once;
// Status and Checkpoints read what the executor publishes under mu_. The
// checkpoint coordinator's thread makes the checkpoint calls
// (CheckpointTaskGateway) through a per-attempt routing table, and posts a
// job failure to the executor. The savepoint calls block their (RPC)
// thread while the coordinator takes the checkpoint.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "common/executor/serial_executor.h"
#include "common/logging/logging.h"
#include "common/process/liveness.h"
#include "common/time/clock.h"
#include "jobmanager/checkpoint/checkpoint_coordinator.h"
#include "jobmanager/checkpoint/state_assignment.h"
#include "jobmanager/execution_graph.h"
#include "jobmanager/resource_manager.h"
#include "jobmanager/restart_strategy.h"
#include "jobmanager/taskmanager_gateway.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager {

// A job's settings, resolved and validated at submission.
struct JobSettings {
  int max_parallelism = 128;
  absl::Duration cancel_timeout = absl::Minutes(3);
  absl::Duration slot_request_timeout = absl::Minutes(5);
  // How long the JobMaster waits, on its clock, for the answer to an
  // attempt's deployment before it takes the tasks not answered for
  // undeployed and fails the attempt: the gRPC gateway's deadline.
  absl::Duration deploy_timeout = kDeployTimeout;
  // state.backend.type: "rocksdb" or "hashmap".
  std::string state_backend = "rocksdb";
  // execution.checkpointing.incremental (rocksdb backend).
  bool incremental_checkpoints = true;
  // Checkpoints are on when this is set: <state.checkpoints.dir>/<job id>.
  std::string checkpoint_dir;
  // execution.checkpointing.externalized-checkpoint-retention: whether
  // checkpoint_dir is deleted when the job ends FAILED / CANCELED or FINISHED.
  enum class Retention { kDeleteOnCancellation, kRetainOnCancellation, kNever };
  Retention retention = Retention::kDeleteOnCancellation;
  // state.backend.local-recovery: tasks keep their last snapshot on their
  // TaskManager, and a restart redeploys them there when it can.
  bool local_recovery = false;
  checkpoint::CheckpointCoordinatorOptions checkpoint;
  RestartStrategyOptions restart;
  // A job a restarted JobManager took over: its first attempt waits for
  // slots and restores the newest intact checkpoint, as a restart does.
  bool recovered = false;
  // The number of the first attempt (after a recovery, one more than the
  // previous JobManager's last, so that task ids never repeat).
  int first_attempt = 1;
  // When the job was submitted (kept across JobManager restarts).
  absl::Time submitted_at = absl::InfinitePast();
  // Called on the JobMaster's executor as each attempt starts (persistence).
  std::function<void(int attempt)> on_attempt;
  // Where the JobMaster's executor shows it is alive (the JobManager's
  // watchdog); null: nowhere.
  Liveness* liveness = nullptr;
  // The time the JobMaster and its checkpoint coordinator decide by (restart
  // delays, timeouts, deadlines, the timestamps of its status); null:
  // time::Clock::Real(). It also becomes checkpoint.clock when that is null.
  time::Clock* clock = nullptr;
  // weir submit -s: the savepoint the job starts from (and restarts from
  // while none of its own checkpoints completed), and the directory its
  // task files are in.
  std::optional<v1::CheckpointMetadata> savepoint;
  std::string savepoint_checkpoint_dir;
  // Operators whose state in `savepoint` is dropped
  // (--allow-non-restored-state): they start without it.
  std::set<std::string> savepoint_dropped_operators;
  // What a submission from `savepoint` is told (dropped or missing state).
  std::vector<std::string> savepoint_notices;
};

// How a JobMaster gets slots and gives them back (the ResourceManager's).
struct SlotProvider {
  // `preferred`: ResourceManager::AllocateSlots's.
  std::function<absl::StatusOr<std::vector<SlotAssignment>>(int count, const std::vector<std::string>& preferred)>
      allocate;
  std::function<void()> release;
};

class JobMaster : private checkpoint::CheckpointTaskGateway {
 public:
  // Called once, on the executor, when the job reaches a terminal state.
  using TerminalCallback = std::function<void(const std::string& job_id, v1::JobState state)>;

  // Opens the job's checkpoint directory when checkpoints are on.
  // `taskmanagers` carries every call to TaskManagers (shared: it may serve
  // other jobs too).
  static absl::StatusOr<std::shared_ptr<JobMaster>> Create(std::string job_id, v1::SubmitJobRequest request,
                                                           ExecutionGraph graph, std::vector<SlotAssignment> slots,
                                                           JobSettings settings, SlotProvider slot_provider,
                                                           std::shared_ptr<TaskManagerGateway> taskmanagers,
                                                           TerminalCallback on_terminal);
  ~JobMaster() override;

  // Starts the executor, which starts the first attempt.
  void Start();

  void OnTaskStateUpdate(const v1::TaskStateUpdate& update);
  // A TaskManager's periodic report of every task it holds: metrics; the
  // final state of a task whose own report did not arrive; and a task of
  // this attempt deployed there that kMissedReportsForLost reports in a row
  // (after kReportGrace) left out has ended unreported, and is failed.
  void OnTaskManagerReport(const v1::ReportTaskMetricsRequest& report);
  static constexpr int kMissedReportsForLost = 3;
  static constexpr absl::Duration kReportGrace = absl::Seconds(10);
  void OnTaskManagerLost(const v1::TaskManagerInfo& info, absl::string_view reason);
  // Free slots may be enough now (ResourceManager::AddSlotsListener): a
  // restart waiting for slots asks for them again.
  void OnSlotsOffered();
  void OnCheckpointAcknowledged(const v1::AcknowledgeCheckpointRequest& ack);
  void OnCheckpointsAcknowledged(absl::Span<const v1::AcknowledgeCheckpointRequest* const> acks);
  void OnCheckpointDeclined(const v1::DeclineCheckpointRequest& decline);

  // Cancels the job; kFailedPrecondition if it already ended, kUnavailable
  // once its leadership was revoked. Returns once the executor took it (the
  // status shows CANCELING).
  absl::Status Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  // This JobManager no longer leads: from the return on, the JobMaster
  // triggers no checkpoint, tells no task of one (so sinks commit nothing on
  // its word), writes nothing (no attempt, no end, no checkpoint metadata,
  // no deletions) and deploys nothing; its executor ends after the event in
  // hand. The job is not ended: the TaskManagers' tasks are left to the new
  // leader, which recovers the job from the store. Idempotent.
  void RevokeLeadership();

  // Triggers a checkpoint, waits for it to complete and copies it into a
  // new savepoint directory under `target` (already checked to be inside
  // state.savepoints.dir); returns that directory. kFailedPrecondition when
  // the job has checkpoints off; kAborted when the checkpoint failed.
  // Blocks the calling (RPC) thread for as long as that takes.
  absl::StatusOr<std::string> TriggerSavepoint(const std::string& target) ABSL_LOCKS_EXCLUDED(mu_);
  // Stop-with-savepoint: like TriggerSavepoint, but the sources emit nothing
  // after the savepoint's barrier; once it is complete and written, every
  // task was told (sinks commit) and the sources end their input, so the job
  // ends FINISHED. Returns the savepoint's directory once it has. When the
  // savepoint cannot be taken or written the job goes on running; when the
  // job fails while finishing, the error names the savepoint (it is usable).
  absl::StatusOr<std::string> StopWithSavepoint(const std::string& target) ABSL_LOCKS_EXCLUDED(mu_);

  v1::JobStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  // Recent checkpoints, newest first, and the checkpoint counters.
  v1::ListCheckpointsResponse Checkpoints() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& job_id() const { return job_id_; }
  // The job binary it runs (never changes).
  const std::string& artifact_sha256() const { return request_.artifact_sha256(); }
  // The submitted graph (immutable).
  const v1::JobGraphSpec& graph_spec() const { return request_.graph(); }

 private:
  struct TaskRecord {
    std::string task_id;
    int chain = 0;
    int subtask = 0;
    SlotAssignment slot;
    v1::TaskState state = v1::TASK_SCHEDULED;
    std::string error;
    int64_t records_in = 0;
    int64_t records_out = 0;
    int64_t backpressured_ms = 0;
    // Event time the task reached, as last reported (it only grows within an
    // attempt, so the last report is the newest).
    std::optional<int64_t> watermark_ms;
    // A task that reached the end of its input and waits for its final
    // checkpoint.
    bool input_ended = false;
    // The restored checkpoint records it as finished: it only ends its
    // outputs, and the coordinator never waits for it.
    bool finished_on_restore = false;
    // Its TaskManager accepted the deployment (at deployed_at); metrics
    // reports of that TaskManager in a row that left it out since.
    bool deployed = false;
    absl::Time deployed_at = absl::InfinitePast();
    int missed_reports = 0;
  };
  // Where an attempt stands; each event's handler acts by it.
  enum class Phase {
    kCreated,           // Start not called yet
    kWaitingForSlots,   // a restart (or a recovery) asks for slots until slot.request.timeout
    kDeploying,         // the deployment is out; tasks may report already
    kRunning,           // deployed; follows the tasks (RUNNING once every task runs)
    kCancelling,        // cancellations sent (failure or weir cancel); waits for every task to end
    kWaitingToRestart,  // the attempt failed; the restart delay runs on the clock
    kEnded,             // terminal state reached; the executor ends
    kRevoked,           // leadership revoked; the executor ends
  };
  // How an attempt ended.
  enum class AttemptEnd { kFinished, kCanceled, kFailed };
  // A deployment's answer: per task (in tasks_ order) OK or why not.
  struct DeploymentAnswer {
    uint64_t deployment = 0;
    std::vector<absl::Status> outcome;
  };
  // Which TaskManager runs each task of an attempt, for the coordinator's
  // calls (its thread reads it; the executor replaces it per attempt).
  struct AttemptRoutes {
    int attempt = 0;
    absl::flat_hash_map<std::string, TaskManagerAddress> task_at;
    std::vector<TaskManagerAddress> taskmanagers;  // sorted by (id, address)
    absl::flat_hash_set<std::string> taskmanager_ids;
  };

  JobMaster(std::string job_id, v1::SubmitJobRequest request, ExecutionGraph graph, std::vector<SlotAssignment> slots,
            JobSettings settings, SlotProvider slot_provider, std::shared_ptr<TaskManagerGateway> taskmanagers,
            TerminalCallback on_terminal);

  // Posts `handler` to the executor as an event: it runs there unless the
  // leadership was revoked before it came up.
  void PostEvent(absl::AnyInvocable<void()> handler);
  // The same, and returns once it ran (or was dropped: the executor ended),
  // or after kMaxEventWait of real time (it runs later); from the executor
  // itself, runs it at once.
  void PostEventAndWait(absl::AnyInvocable<void()> handler);
  static constexpr absl::Duration kMaxEventWait = absl::Seconds(1);

  // The events (executor only).
  void HandleStart() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleTaskStateUpdate(const v1::TaskStateUpdate& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleTaskManagerReport(const v1::ReportTaskMetricsRequest& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleTaskManagerLost(const v1::TaskManagerInfo& info, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleDeploymentAnswered(DeploymentAnswer answer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleDeploymentTimedOut(uint64_t deployment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status HandleCancelRequested() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleCancellationTimedOut(uint64_t cancellation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleRestartDelayElapsed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleSlotsOffered() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleSlotRequestTimedOut() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  void HandleCheckpointFailure(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void HandleLeadershipRevoked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);

  bool InAttempt() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) {
    return phase_ == Phase::kDeploying || phase_ == Phase::kRunning || phase_ == Phase::kCancelling;
  }
  // After every event of an attempt: hands a running attempt to the
  // coordinator, sends the cancellations a failure or weir cancel asked for,
  // declares the end of an attempt whose tasks all ended.
  void Step() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // Builds the attempt's tasks on `slots_` and sends their deployment.
  void StartAttempt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes a deployment's per-task outcome into the task records.
  void TakeDeploymentOutcome(const std::vector<absl::Status>& outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  void EndAttempt(AttemptEnd end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for slots up to slot_request_timeout; then restores and deploys.
  void WaitForSlots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // One request to the slot provider; `last`: the timeout has come.
  void RequestSlots(bool last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // With slots (or why there are none): restores and starts the next attempt.
  void AfterSlots(absl::Status slots) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the job in `final_state`: stops the coordinator, applies the
  // retention, tells on_terminal_, and ends the executor.
  void Finish(v1::JobState final_state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) ABSL_LOCKS_EXCLUDED(mu_);
  // Sends the cancellation of the current attempt to every TaskManager it
  // used (on the calls thread) and starts the cancellation timeout.
  void SendCancellation(const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A Busy step of the executor's liveness (storage, coordinator waits).
  Liveness::Loop* live() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_) { return executor_.liveness_loop(); }

  // The newest intact complete checkpoint, or nullopt; logs every one skipped.
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> ChooseCheckpoint();
  // ChooseCheckpoint, else the savepoint the job was submitted from; sets
  // restored_from_savepoint_.
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> ChooseRestore() ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // TriggerSavepoint and StopWithSavepoint: returns the savepoint's directory
  // and the checkpoint it copies.
  absl::StatusOr<std::pair<std::string, int64_t>> TakeSavepoint(const std::string& target, bool stop)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a sink of the job writes exactly-once (transactions).
  bool HasExactlyOnceSink() const;
  // What the coordinator records for `task` once it finished: its chain's
  // vertices and operator ids, its subtask and the chain's parallelism.
  v1::TaskStateHandle Identity(const TaskRecord& task) const;
  // Checkpoint retention when the job ends in `final_state`
  // (execution.checkpointing.externalized-checkpoint-retention): whether
  // its checkpoints stay; the newest kept one's directory (logged) or "";
  // deleting them all. On the executor, once the coordinator stopped.
  bool KeepsCheckpoints(v1::JobState final_state) const;
  std::string NewestKeptCheckpoint();
  void DeleteCheckpoints(v1::JobState final_state);
  // `restore_index`: IndexOperators of `restore`, when set.
  absl::StatusOr<v1::TaskDeploymentDescriptor> Describe(const TaskRecord& task,
                                                        const std::optional<v1::CheckpointMetadata>& restore,
                                                        const checkpoint::OperatorIndex* restore_index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  // Where `task`'s operators' state comes from in `restore` (by operator
  // id), into `tdd`; or that it is finished there.
  absl::Status DescribeRestore(const TaskRecord& task, const v1::CheckpointMetadata& restore,
                               const checkpoint::OperatorIndex& index, v1::TaskDeploymentDescriptor* tdd) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  void OnTaskStateUpdateLocked(const v1::TaskStateUpdate& update) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  // Every change of a task's state goes through here: it keeps the counts
  // that tell in O(1) whether all tasks run or ended.
  void SetTaskStateLocked(TaskRecord& task, v1::TaskState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  // Marks a source task's input as ended (once).
  void SetInputEndedLocked(TaskRecord& task) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  // Fails the current attempt with `error` unless the job is already ending.
  void FailLocked(const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  bool AllTasksTerminal() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_);
  TaskRecord* FindTaskLocked(const std::string& task_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(executor_, mu_);
  std::string TaskLabel(const TaskRecord& task) const;
  // Sets restored_checkpoint_id_ for an attempt starting from `restore`.
  void NoteRestoreLocked(const std::optional<v1::CheckpointMetadata>& restore) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // CheckpointTaskGateway (the coordinator's thread). Triggers go out as one
  // TriggerCheckpoints call per TaskManager, to all of them at once.
  absl::Status TriggerCheckpoints(int attempt, const std::vector<std::string>& task_ids, int64_t id,
                                  int64_t timestamp_unix_ms, bool stop) override ABSL_LOCKS_EXCLUDED(routes_mu_);
  void FinishStop(int attempt, int64_t id, bool end_input) override;
  void NotifyCheckpoint(int attempt, int64_t id, bool completed, const std::string& reason) override;
  void FailJob(const std::string& reason) override;
  // Sends `request` (job, attempt and id filled in) to every TaskManager of
  // `attempt`, to all at once; a no-op for another attempt.
  void SendNotification(int attempt, int64_t id, v1::NotifyCheckpointRequest request)
      ABSL_LOCKS_EXCLUDED(routes_mu_);
  std::shared_ptr<const AttemptRoutes> routes() const ABSL_LOCKS_EXCLUDED(routes_mu_);

  const std::string job_id_;
  const v1::SubmitJobRequest request_;
  const ExecutionGraph graph_;
  const JobSettings settings_;
  time::Clock& clock_;  // settings_.clock or the real one
  const SlotProvider slot_provider_;
  const std::shared_ptr<TaskManagerGateway> taskmanagers_;
  const TerminalCallback on_terminal_;
  const absl::Time submitted_at_;
  std::shared_ptr<spdlog::logger> log_;
  // Null when checkpoints are off. Its calls into this object take no lock
  // of the JobMaster's but routes_mu_.
  std::unique_ptr<checkpoint::CheckpointCoordinator> coordinator_;
  // Set first thing by RevokeLeadership; read by every thread before it
  // acts for the job.
  std::atomic<bool> revoked_{false};

  // The decisions: made on executor_ only, so they need no lock.
  mutable SerialExecutor executor_;
  // Deployments and cancellations, in the order sent; its tasks post their
  // answers to executor_. It decides nothing, and idles on real time.
  SerialExecutor calls_;
  std::unique_ptr<RestartStrategy> restart_strategy_ ABSL_GUARDED_BY(executor_);
  Phase phase_ ABSL_GUARDED_BY(executor_) = Phase::kCreated;
  std::vector<SlotAssignment> slots_ ABSL_GUARDED_BY(executor_);
  // The checkpoint the current (or next) attempt restores.
  std::optional<v1::CheckpointMetadata> restore_ ABSL_GUARDED_BY(executor_);
  // Indexes into tasks_, built with it by StartAttempt: a report or state
  // update costs the tasks it names, not all the job's tasks.
  absl::flat_hash_map<std::string, size_t> task_index_ ABSL_GUARDED_BY(executor_);
  absl::flat_hash_map<std::string, std::vector<size_t>> tasks_of_taskmanager_ ABSL_GUARDED_BY(executor_);
  // The TaskManagers of the attempt, sorted by (id, address).
  std::vector<TaskManagerAddress> attempt_taskmanagers_ ABSL_GUARDED_BY(executor_);
  // Counts over tasks_ kept by SetTaskStateLocked.
  size_t running_tasks_ ABSL_GUARDED_BY(executor_) = 0;
  size_t terminal_tasks_ ABSL_GUARDED_BY(executor_) = 0;
  // Where each chain's tasks start in tasks_ (chain by chain, by subtask).
  std::vector<size_t> first_task_of_chain_ ABSL_GUARDED_BY(executor_);
  // The current attempt failed (its tasks are being canceled).
  bool attempt_failed_ ABSL_GUARDED_BY(executor_) = false;
  // A source task reported the end of its input since the coordinator was
  // last asked for a checkpoint soon (the final one of that task).
  bool final_checkpoint_wanted_ ABSL_GUARDED_BY(executor_) = false;
  // A task of this attempt failed with weir::UnrecoverableError: no restart.
  std::string unrecoverable_ ABSL_GUARDED_BY(executor_);
  // Set when cancellations must go out (failure or weir cancel), and once
  // they did.
  bool cancel_requested_ ABSL_GUARDED_BY(executor_) = false;
  std::string cancel_reason_ ABSL_GUARDED_BY(executor_);
  bool cancel_sent_ ABSL_GUARDED_BY(executor_) = false;
  // Every task of the attempt runs: Step hands them to the coordinator.
  bool start_checkpoints_ ABSL_GUARDED_BY(executor_) = false;
  std::vector<std::string> finished_tasks_ ABSL_GUARDED_BY(executor_);
  // The deployment in flight (0: none) and the last one's number; the
  // cancellation whose timeout runs.
  uint64_t deployment_ ABSL_GUARDED_BY(executor_) = 0;
  uint64_t deployments_ ABSL_GUARDED_BY(executor_) = 0;
  uint64_t cancellations_ ABSL_GUARDED_BY(executor_) = 0;
  // The first attempt of a job taken over from a JobManager that stopped.
  bool recovering_ ABSL_GUARDED_BY(executor_) = false;
  // While waiting for slots: until when, the last refusal, whether it was
  // logged, the preferred TaskManagers (local recovery).
  absl::Time slot_deadline_ ABSL_GUARDED_BY(executor_);
  absl::Status slot_refusal_ ABSL_GUARDED_BY(executor_);
  bool slot_refusal_logged_ ABSL_GUARDED_BY(executor_) = false;
  std::vector<std::string> preferred_ ABSL_GUARDED_BY(executor_);
  // The clock's timers of the current phase.
  time::TimerHandle restart_timer_ ABSL_GUARDED_BY(executor_);
  time::TimerHandle slot_timer_ ABSL_GUARDED_BY(executor_);
  time::TimerHandle cancel_timer_ ABSL_GUARDED_BY(executor_);

  // What Status and Checkpoints show: changed on the executor with mu_ held.
  mutable absl::Mutex mu_;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::CREATED;
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::string last_failure_ ABSL_GUARDED_BY(mu_);
  // What the job waits for while RESTARTING (JobStatus.waiting_for).
  std::string waiting_for_ ABSL_GUARDED_BY(mu_);
  absl::Time ended_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int attempt_ ABSL_GUARDED_BY(mu_) = 1;
  int restarts_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t restored_checkpoint_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The restore of the current attempt is settings_.savepoint.
  bool restored_from_savepoint_ ABSL_GUARDED_BY(mu_) = false;
  // Attempts that restored a checkpoint or savepoint, and when the current
  // one did (REST /jobs/{id}/checkpoints).
  int64_t restored_count_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time restored_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<TaskRecord> tasks_ ABSL_GUARDED_BY(mu_);

  mutable absl::Mutex routes_mu_;
  std::shared_ptr<const AttemptRoutes> routes_ ABSL_GUARDED_BY(routes_mu_);
};

bool IsTerminal(v1::TaskState state);
bool IsTerminal(v1::JobState state);

// The keys a submission sets with -D, checked as the daemons check theirs:
// a Weir key (or Flink's name for one) passes; a Flink setting Weir has no
// use for passes with a notice; a misspelling of a Weir key, or any other
// key in a namespace Weir's keys use, is refused naming the nearest key.
// Other keys are the job's own settings (OperatorContext::JobConfig).
// Only submission checks: a stored job is recovered as it was accepted.
absl::Status CheckJobConfigKeys(const google::protobuf::Map<std::string, std::string>& job_config,
                                std::vector<std::string>* notices);

// The settings of a job: the cluster's configuration, overridden by the
// job-level keys the submission sets with -D (execution.checkpointing.*,
// restart-strategy.*, state.checkpoints.num-retained, slot.request.timeout),
// under their Weir names or Flink's (config::CanonicalKey).
// kInvalidArgument for a bad value or a cluster-only key set per job.
absl::StatusOr<JobSettings> ResolveJobSettings(const config::Configuration& cluster,
                                               const google::protobuf::Map<std::string, std::string>& job_config,
                                               const std::string& job_id);

}  // namespace weir::jobmanager
