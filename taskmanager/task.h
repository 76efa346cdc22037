// Task: one subtask of one chain of a job, running on its own thread.
//
// It loads the job (once per job per TaskManager, through a JobLoader),
// builds its OperatorChain, and runs a mailbox loop until its input ends
// (bounded jobs), it is canceled, or it fails. Each turn of the loop first
// runs the pending mails — work other threads hand to the task, such as
// checkpoint triggers and notifications — then takes one step of input: a
// PollNext of the source, or one buffer from the InputGate. When there is
// nothing to do it waits on one Wakeup that the mailbox, the input gate and
// cancellation all bump. So mails run between records, on the task thread,
// never concurrently with user code. An exception from user code fails the
// task with its message; the TaskManager goes on.
//
// Records in: records that entered the chain (from the input channels, or
// produced by the source). Records out: records that left the chain (to
// the output partitions, or into the sink).
//
// Thread-safety: Start, Cancel, PostMail, state() and Metrics() from any
// thread; the rest runs on the task thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "connectors/registry.h"
#include "taskmanager/cancellation.h"
#include "taskmanager/checkpointing/snapshot_uploader.h"
#include "taskmanager/checkpointing/subtask_checkpointer.h"
#include "taskmanager/job_artifacts.h"
#include "taskmanager/mailbox/mailbox.h"
#include "taskmanager/metrics/task_metrics.h"
#include "taskmanager/network/network_client.h"
#include "taskmanager/network/result_partition.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

class OperatorChain;

// Where a Task reports its state changes (the JobManager).
class TaskStateListener {
 public:
  virtual ~TaskStateListener() = default;
  virtual void OnTaskState(const v1::TaskStateUpdate& update) = 0;
};

struct TaskEnvironment {
  std::string taskmanager_id;
  JobLoader* artifacts = nullptr;
  network::PartitionManager* partitions = nullptr;
  // The TaskManager's client side of the data exchange (remote input
  // channels); null gives each gate a private one (tests).
  std::shared_ptr<network::NetworkClient> network;
  TaskStateListener* listener = nullptr;
  // taskmanager.network.memory.buffers-per-channel: a remote input channel's
  // credit; max-buffers-per-channel: an output subpartition's capacity.
  int buffers_per_channel = 4;
  int max_buffers_per_channel = 4;
  int segment_size = 32 * 1024;
  absl::Duration buffer_timeout = absl::Milliseconds(100);
  // pipeline.auto-watermark-interval: how often OnPeriodicEmit runs.
  absl::Duration watermark_interval = absl::Milliseconds(50);
  // pipeline.watermark.stall-warning: how long event time may wait on one
  // input channel (or a Kafka source's partition) while the others move on
  // before the task logs which; zero: never.
  absl::Duration event_time_stall_warning = absl::Seconds(60);
  int max_parallelism = 128;
  // The connectors that jobs name (connectors/builtin.h); shared by every
  // task. Null: none.
  std::shared_ptr<const connectors::ConnectorRegistry> connectors;
  // Keyed state: the backend when the deployment does not name one, and the
  // local directory of the rocksdb backend's instances.
  std::string state_backend = "rocksdb";
  // state.backend.rocksdb.writebuffer.size.
  int64_t rocksdb_write_buffer_bytes = 32 << 20;
  std::string local_state_dir = "/tmp/weir-state";
  // Checkpoints: the asynchronous part of snapshots runs on `uploader`, and
  // acknowledgements go to `checkpoint_responder`. Both null: a task that is
  // asked to checkpoint declines.
  SnapshotUploader* uploader = nullptr;
  CheckpointResponder* checkpoint_responder = nullptr;
};

class Task {
 public:
  // A mail: runs on the task thread between two records, with the task's
  // open operator chain (mails put earlier wait until it is open). Its error
  // fails the task.
  using ChainMail = std::function<absl::Status(OperatorChain* chain)>;

  Task(v1::TaskDeploymentDescriptor tdd, TaskEnvironment env);
  ~Task();  // joins the task thread

  void Start();
  // Asks the task to stop; it ends CANCELED soon after.
  void Cancel(const std::string& reason);
  // Hands `mail` to the task thread; false when the task has ended.
  bool PostMail(std::string description, ChainMail mail);
  // Starts checkpoint `checkpoint_id` at this (source) task, between two
  // records; kNotFound when the task has ended. `stop` (stop-with-savepoint):
  // after the barrier the source emits nothing until FinishStop, or until
  // the checkpoint is aborted.
  absl::Status TriggerCheckpoint(int64_t checkpoint_id, int64_t timestamp_ms, bool stop = false);
  // Tells the operators that `checkpoint_id` completed (or was aborted).
  void NotifyCheckpoint(int64_t checkpoint_id, bool completed);
  // A source stopped for stop-with-savepoint `checkpoint_id` ends its input
  // (`end_input`: the task then finishes) or resumes. Ignored by other tasks.
  void FinishStop(int64_t checkpoint_id, bool end_input);

  bool done() const { return done_.HasBeenNotified(); }
  // When Cancel was first called, or nullopt; for the TaskManager's
  // cancellation watchdog.
  std::optional<absl::Time> cancel_requested_at() const {
    const int64_t ms = cancel_requested_ms_.load();
    if (ms == 0) return std::nullopt;
    return absl::FromUnixMillis(ms);
  }
  // Writes the task thread's backtrace to stderr (process::WriteBacktraceOf),
  // for a task that does not end; false when the thread did not answer.
  bool WriteThreadBacktrace();
  const std::string& task_id() const { return tdd_.task_id(); }
  const std::string& job_id() const { return tdd_.job_id(); }
  int attempt() const { return tdd_.attempt(); }
  int slot_index() const { return tdd_.slot_index(); }
  int subtask_index() const { return tdd_.subtask_index(); }
  // The chained operators' names, "Source -> Map".
  std::string name() const;
  v1::TaskMetrics Metrics() const;
  // What its operators registered (weir/metrics.h), for /metrics.
  const TaskMetrics& operator_metrics() const { return operator_metrics_; }

 private:
  class Execution;
  void Run();
  // Source loop, before it runs its mails: ends what TriggerCheckpoint
  // admitted over capacity.
  void EndOverCapacity() ABSL_LOCKS_EXCLUDED(partitions_mu_);
  void Report(v1::TaskState state, const std::string& error, bool unrecoverable = false,
              bool input_ended = false);
  // Task thread: takes checkpoint `checkpoint_id` (checkpointer_ set), and
  // remembers the first one taken after the end of input.
  absl::Status TakeCheckpoint(OperatorChain& chain, int64_t checkpoint_id, int64_t timestamp_ms,
                              absl::Duration alignment);

  const v1::TaskDeploymentDescriptor tdd_;
  const TaskEnvironment env_;
  std::shared_ptr<spdlog::logger> log_;
  std::thread thread_;
  absl::Notification done_;
  absl::Notification cancel_requested_;
  std::atomic<int64_t> cancel_requested_ms_{0};  // Unix ms; 0 until Cancel
  std::atomic<pid_t> thread_tid_{0};             // the task thread's kernel id, once it runs
  // Fired by Cancel: ends the download of the job binary, or the wait for
  // another task's load of it.
  Cancellation cancellation_;
  // Bumped by mails, input and cancellation; the task thread waits on it.
  const std::shared_ptr<Wakeup> wakeup_;
  Mailbox mailbox_;
  // Task thread only: the chain while it is open, for mails.
  OperatorChain* open_chain_ = nullptr;
  // Task thread only.
  std::unique_ptr<SubtaskCheckpointer> checkpointer_;
  // Task thread only: the stop-with-savepoint checkpoint the source stopped
  // emitting after, and whether it was told to end its input.
  std::optional<int64_t> stopped_at_;
  bool end_after_stop_ = false;
  // Final checkpoint (tdd.final_checkpoint): the chain's input ended (its
  // operators' EndInput ran); the first checkpoint the task took after that;
  // whether a checkpoint at or after it completed (the task then ends).
  bool input_ended_ = false;
  std::optional<int64_t> final_barrier_;
  bool final_checkpoint_done_ = false;
  // Outlives the chain, whose operators update it.
  TaskMetrics operator_metrics_;
  std::atomic<int64_t> records_in_{0};
  std::atomic<int64_t> records_out_{0};
  std::atomic<int64_t> watermark_{kMinWatermark};
  // The final report, for Metrics() once the task ended (done_ notified
  // after they are set).
  v1::TaskState final_state_ = v1::TASK_STATE_UNSPECIFIED;
  std::string final_error_;
  bool final_unrecoverable_ = false;
  // The partitions this task produces; released on cancel to unblock it.
  mutable absl::Mutex partitions_mu_;
  std::vector<std::shared_ptr<network::ResultPartition>> partitions_ ABSL_GUARDED_BY(partitions_mu_);
  // Whether a checkpoint trigger let the partitions take buffers over
  // capacity (ResultPartition::AdmitOverCapacity) since the source loop
  // last ran its mails.
  // Written under partitions_mu_; read without it first (every poll).
  std::atomic<bool> over_capacity_admitted_{false};
};

}  // namespace weir::taskmanager
