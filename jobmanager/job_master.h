// JobMaster: runs one job — deploys its tasks to the slots it was given,
// follows their states, and ends the job FINISHED (every task finished),
// FAILED (a task failed or its TaskManager was lost: the other tasks are
// canceled), or CANCELED (weir cancel).
//
// Restarts come with checkpoints; until then a failure is final.
//
// Thread-safety: thread-safe. A worker thread owned by the JobMaster makes
// the deployment and cancellation calls; the other methods are called from
// gRPC threads and the ResourceManager's loss listener.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "jobmanager/execution_graph.h"
#include "jobmanager/resource_manager.h"
#include "weir/v1/cluster.grpc.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager {

class JobMaster {
 public:
  // Called once, from the worker thread, when the job reaches a terminal state.
  using TerminalCallback = std::function<void(const std::string& job_id, v1::JobState state)>;

  JobMaster(std::string job_id, v1::SubmitJobRequest request, ExecutionGraph graph, std::vector<SlotAssignment> slots,
            int max_parallelism, absl::Duration cancel_timeout, TerminalCallback on_terminal);
  ~JobMaster();

  // Starts deploying on the worker thread.
  void Start();

  void OnTaskStateUpdate(const v1::TaskStateUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);
  void OnTaskMetrics(const v1::TaskMetrics& metrics) ABSL_LOCKS_EXCLUDED(mu_);
  void OnTaskManagerLost(const v1::TaskManagerInfo& info, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels the job; kFailedPrecondition if it already ended.
  absl::Status Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  v1::JobStatus Status() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& job_id() const { return job_id_; }

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
  };

  void Run();
  absl::Status DeployAll();
  v1::TaskDeploymentDescriptor Describe(const TaskRecord& task) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelTasksOnTaskManagers(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Marks tasks [first, end) that are still DEPLOYING as CANCELED.
  void MarkUndeployed(size_t first) ABSL_LOCKS_EXCLUDED(mu_);
  // Moves the job to FAILING with `error` unless it is already ending.
  void FailLocked(const std::string& error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllTasksTerminalLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskRecord* FindTaskLocked(const std::string& task_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string TaskLabel(const TaskRecord& task) const;
  std::shared_ptr<v1::TaskExecutorService::Stub> StubFor(const std::string& address);

  const std::string job_id_;
  const v1::SubmitJobRequest request_;
  const ExecutionGraph graph_;
  const int max_parallelism_;
  const absl::Duration cancel_timeout_;
  const TerminalCallback on_terminal_;
  const absl::Time submitted_at_;
  std::shared_ptr<spdlog::logger> log_;

  mutable absl::Mutex mu_;
  v1::JobState state_ ABSL_GUARDED_BY(mu_) = v1::CREATED;
  std::string error_ ABSL_GUARDED_BY(mu_);
  absl::Time ended_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<TaskRecord> tasks_ ABSL_GUARDED_BY(mu_);
  // Set when the worker must send cancellations (failure or weir cancel).
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex stubs_mu_;
  std::map<std::string, std::shared_ptr<v1::TaskExecutorService::Stub>> stubs_ ABSL_GUARDED_BY(stubs_mu_);

  std::thread worker_;
};

bool IsTerminal(v1::TaskState state);
bool IsTerminal(v1::JobState state);

}  // namespace weir::jobmanager
