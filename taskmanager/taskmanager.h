// TaskManager: the process-level object of weir-taskmanager. Owns the slots,
// the gRPC server other processes call (TaskExecutorService), and the
// connection that keeps it registered with the JobManager. Task threads, the
// network stack and the state backend join it in later versions.
//
// Lifecycle: Start -> Shutdown (deregisters). Owned by the daemon's main
// thread.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config/configuration.h"
#include "common/http/http_server.h"
#include "common/logging/logging.h"
#include "taskmanager/job_artifacts.h"
#include "taskmanager/network/data_exchange_service.h"
#include "taskmanager/network/network_client.h"
#include "taskmanager/network/result_partition.h"
#include "taskmanager/resource_manager_connection.h"
#include "taskmanager/slot_table.h"
#include "taskmanager/state/local_state_directory.h"
#include "taskmanager/task.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/job.grpc.pb.h"

namespace weir::taskmanager {

class TaskManager : private TaskStateListener, private CheckpointResponder {
 public:
  static absl::StatusOr<std::unique_ptr<TaskManager>> Start(const config::Configuration& config);
  ~TaskManager();

  void Shutdown(const std::string& reason);

  const std::string& id() const { return info_.taskmanager_id(); }
  const std::string& address() const { return info_.address(); }
  // Port of the HTTP endpoint (taskmanager.rest.port, or the free one picked).
  int rest_port() const { return info_.rest_port(); }
  // True while registered with the JobManager (from any thread).
  bool Registered() const;
  // False when the maintenance loop (metrics, reaping finished tasks) has
  // not come round for 30 s: something holds it (from any thread).
  bool Alive() const;

 private:
  class Service;
  TaskManager() = default;

  // Waits (up to kEarlierAttemptWait) for the tasks of earlier attempts of
  // the same job on this TaskManager to end first.
  absl::Status Deploy(const v1::TaskDeploymentDescriptor& tdd) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  static constexpr absl::Duration kEarlierAttemptWait = absl::Seconds(10);
  static constexpr absl::Duration kEarlierAttemptPoll = absl::Milliseconds(5);
  void CancelJob(const std::string& job_id, int attempt, const std::string& reason) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // Hands a checkpoint trigger to a source task (kNotFound: no such task).
  absl::Status TriggerCheckpoint(const v1::TriggerCheckpointRequest& request) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // Hands a checkpoint trigger to each source task named; lists in
  // `response` those that do not run here. kInvalidArgument, triggering
  // none, when it names more tasks than a job may have.
  absl::Status TriggerCheckpoints(const v1::TriggerCheckpointsRequest& request,
                                  v1::TriggerCheckpointsResponse* response) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // Tells every task of the job attempt a checkpoint's fate.
  void NotifyCheckpoint(const v1::NotifyCheckpointRequest& request) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // A trigger or notification on the membership session (the session's
  // reader thread): as the calls above; a trigger for a task that does not
  // run here is declined, from the maintenance thread.
  void OnCheckpointMessage(const v1::JobManagerMessage& message) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // CheckpointResponder: sends the outcome of a task's snapshot to the
  // JobManager (from the snapshot uploader thread, retrying briefly).
  void Acknowledge(const v1::AcknowledgeCheckpointRequest& ack) override;
  void Decline(const v1::DeclineCheckpointRequest& decline) override;
  // Sends the acknowledgements Acknowledge kept, in AcknowledgeCheckpoints
  // calls (one by one to a JobManager without that call). The uploader
  // thread, whenever its queue runs empty.
  void SendAcknowledgements();
  // Sends a task's state to the JobManager (retrying briefly).
  void OnTaskState(const v1::TaskStateUpdate& update) override;
  // Ends the data exchange's streams and stops the RPC server and the
  // network threads. Idempotent; also after a failed Start.
  void StopRpcServer();
  // Reports metrics of running tasks and reaps finished ones, every second.
  void MaintenanceLoop();
  // taskmanager.memory.release-code-pages, from the maintenance loop.
  // `when` says what the release follows, in its log line.
  void ReleaseCodePages(absl::string_view when);
  // The cancellation watchdog, from the maintenance loop: warns about a
  // cancelled task not ended after half of task.cancellation.timeout, and
  // exits the process (ExitForStuckTasks) once one is past all of it.
  void WatchCancelledTasksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tasks_mu_);
  // Writes the stuck tasks' backtraces and one error line naming them,
  // flushes the logs and ends the process with exit code 1.
  [[noreturn]] void ExitForStuckTasks(const std::vector<Task*>& stuck);
  // Deletes the local recovery copies (<local state>/local-recovery/<job>/
  // <range>) that no checkpoint touched for 10 min.
  void SweepLocalRecovery();
  // After a re-registration the JobManager has failed (or forgotten) every
  // task we ran: cancel them rather than let them run unsupervised.
  // `leader_epoch` becomes the one this TaskManager follows (even if lower:
  // registering is choosing the leader).
  // `jobmanager_address`: where the JobManager registered with serves; the
  // task reports go there from now on (it changes when another JobManager
  // is elected).
  void OnRegistered(const std::string& jobmanager_session_id, int64_t leader_epoch,
                    const std::string& jobmanager_address) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // The JobMasterService of the JobManager last registered with (at first,
  // the configured one).
  std::shared_ptr<v1::JobMasterService::Stub> JobMasterStub() const ABSL_LOCKS_EXCLUDED(job_master_mu_);
  // Where a job binary download goes now: the leader etcd names (with
  // high-availability.type etcd), else the JobManager last registered with.
  ArtifactServer ArtifactServerNow() ABSL_LOCKS_EXCLUDED(job_master_mu_);
  // The fence on every call a JobManager makes here (`call` names it for
  // the messages): refuses a call without the leader epoch metadata (unless
  // the JobManager registered with is of a version without epochs: 0), or
  // with an epoch below the one followed (a deposed JobManager's); a higher
  // one is followed from then on (its registration may still be on its
  // way).
  absl::Status AdmitLeader(const grpc::ServerContext& context, absl::string_view call) ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // /metrics: slots, registration and the running tasks' counters.
  std::string MetricsText() ABSL_LOCKS_EXCLUDED(tasks_mu_);
  // Tells the slot table which job each slot's tasks belong to.
  void UpdateSlotsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(tasks_mu_);

  std::shared_ptr<spdlog::logger> log_;
  v1::TaskManagerInfo info_;
  std::unique_ptr<SlotTable> slots_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ResourceManagerConnection> connection_;
  // Reads tasks_ and the connection: stopped before they go.
  std::unique_ptr<http::HttpServer> http_;
  // connection_ once it is started, for the HTTP threads.
  std::atomic<const ResourceManagerConnection*> probed_connection_{nullptr};
  bool shut_down_ = false;

  TaskEnvironment task_env_;
  std::unique_ptr<network::PartitionManager> partitions_;
  std::unique_ptr<network::DataExchangeServiceImpl> data_exchange_;
  // Shared with the input gates of the tasks.
  std::shared_ptr<network::NetworkClient> network_client_;
  std::unique_ptr<JobArtifacts> artifacts_;
  // Where the rocksdb backend's instances live; locked while this process runs.
  std::unique_ptr<LocalStateDirectory> local_state_;
  mutable absl::Mutex job_master_mu_;
  std::shared_ptr<v1::JobMasterService::Stub> job_master_ ABSL_GUARDED_BY(job_master_mu_);
  std::string job_master_address_ ABSL_GUARDED_BY(job_master_mu_);
  // The JobManager job binaries were last downloaded from.
  std::shared_ptr<v1::ArtifactService::Stub> artifact_server_ ABSL_GUARDED_BY(job_master_mu_);
  std::string artifact_server_address_ ABSL_GUARDED_BY(job_master_mu_);
  // The leader's address from etcd; empty without high-availability.type
  // etcd. Set before the server starts, then read-only.
  std::function<absl::StatusOr<std::string>()> find_leader_;
  // The asynchronous part of task snapshots.
  std::unique_ptr<SnapshotUploader> uploader_;
  // Acknowledgements not sent yet, and whether the JobManager lacks
  // AcknowledgeCheckpoints. Uploader thread only.
  std::vector<v1::AcknowledgeCheckpointRequest> pending_acks_;
  // (Reset at every registration: the JobManager may be another.)
  std::atomic<bool> batched_acks_unsupported_{false};

  absl::Mutex tasks_mu_;
  std::map<std::string, std::unique_ptr<Task>> tasks_ ABSL_GUARDED_BY(tasks_mu_);
  bool stopping_ ABSL_GUARDED_BY(tasks_mu_) = false;
  std::string jobmanager_session_ ABSL_GUARDED_BY(tasks_mu_);
  int64_t leader_epoch_ ABSL_GUARDED_BY(tasks_mu_) = 0;
  logging::RateLimiter fence_log_limiter_{std::chrono::seconds(10)};
  // Declines of triggers that came on the membership session for tasks not
  // here, for the maintenance thread to send (it wakes for them).
  std::vector<v1::DeclineCheckpointRequest> pending_declines_ ABSL_GUARDED_BY(tasks_mu_);
  std::thread maintenance_;
  // task.cancellation.timeout: how long a cancelled task may take to end
  // (the watchdog in the maintenance loop, and Shutdown); 0: no bound.
  absl::Duration cancel_timeout_ = absl::Minutes(3);
  // Cancelled tasks already warned about (half the timeout gone).
  // Maintenance thread only.
  std::set<std::string> warned_slow_cancel_;
  // Maintenance thread only.
  absl::Time last_sweep_ = absl::InfinitePast();
  // taskmanager.memory.release-code-pages. Set in Start.
  bool release_code_pages_ = true;
  // When the last deployment (or the start) was, and whether the code pages
  // were released since: they are, once the deployments have been quiet
  // for kCodePagesQuietPeriod (a job's set-up code has run by then).
  absl::Time last_deploy_ ABSL_GUARDED_BY(tasks_mu_) = absl::Now();
  bool code_pages_due_ ABSL_GUARDED_BY(tasks_mu_) = true;
  // Deployed tasks that have not yet reported RUNNING (or an end). When the
  // last of them does, the code pages are released at once, on its thread:
  // the set-up's pages (deployment, loading the job, restoring state) leave
  // before the records flow at full rate and the buffers fill, rather than
  // adding to that peak until the quiet period has passed.
  std::set<std::string> setting_up_ ABSL_GUARDED_BY(tasks_mu_);
  // And once more kCodePagesFollowUp later, from the maintenance loop: a
  // source opens its Kafka clients when it starts running (SASL plugins,
  // OpenSSL, connections), after it reported RUNNING. `follow_up_new_`
  // wakes the loop to take the new time.
  absl::Time code_pages_follow_up_ ABSL_GUARDED_BY(tasks_mu_) = absl::InfiniteFuture();
  bool follow_up_new_ ABSL_GUARDED_BY(tasks_mu_) = false;
  static constexpr absl::Duration kCodePagesFollowUp = absl::Milliseconds(300);
  static constexpr absl::Duration kCodePagesQuietPeriod = absl::Seconds(2);
  // Tasks that ended, with their final metrics: in every report until one
  // is delivered (at most kEndingReportTries), so that how a task ended
  // reaches the JobManager even when its own report did not. Maintenance
  // thread only.
  std::map<std::string, std::pair<v1::TaskMetrics, int>> unconfirmed_endings_;
  static constexpr int kEndingReportTries = 60;
  // When the maintenance loop last came round (Unix ms), for Alive.
  std::atomic<int64_t> maintenance_tick_ms_{0};
  // test.drop-final-task-reports: for tests of the JobManager's
  // reconciliation only. Set in Start.
  enum class DropFinalReports { kNone, kStateReports, kAll };
  DropFinalReports drop_final_reports_ = DropFinalReports::kNone;
};

}  // namespace weir::taskmanager
