// TaskManagerGateway: everything a JobMaster sends to TaskManagers —
// deployments, cancellations, checkpoint triggers and checkpoint
// notifications — so that the JobMaster's logic does not depend on how they
// travel. GrpcTaskManagerGateway (grpc_taskmanager_gateway.h) is the
// daemon's; InMemoryTaskManagerGateway lets a test answer each call itself.
//
// Each method takes many TaskManagers at once and returns when every one of
// them answered or its deadline passed; results come back in the order of
// the calls given, as absl::Status (kDeadlineExceeded: no answer in time).
//
// Thread-safety: implementations are thread-safe. A JobMaster calls
// DeployTasks and CancelJobTasks from a thread of its own (one at a time,
// in order), and
// TriggerCheckpoints and NotifyCheckpoint from its checkpoint
// coordinator's thread, possibly at the same time; one gateway may serve
// many JobMasters. Calls block; no lock may be held across them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "weir/v1/cluster.pb.h"

namespace weir::jobmanager {

// The deadline of a deployment: the gRPC gateway's, and the time a JobMaster
// waits for a deployment's answer (JobSettings::deploy_timeout).
inline constexpr absl::Duration kDeployTimeout = absl::Seconds(30);

// A TaskManager as the JobMaster knows it from its slots.
struct TaskManagerAddress {
  std::string taskmanager_id;
  std::string address;
};

// One DeployTasks call: the tasks of `request` to the TaskManager at `address`.
struct DeployTasksCall {
  std::string address;
  v1::DeployTasksRequest request;
};

// One TriggerCheckpoints call: the source tasks of `request` at `taskmanager`.
struct TriggerCheckpointsCall {
  TaskManagerAddress taskmanager;
  v1::TriggerCheckpointsRequest request;
};

// How one TriggerCheckpoints call went: OK when every task of it was
// triggered; else why not, and the task that is about.
struct TriggerCheckpointsResult {
  absl::Status status;
  std::string task_id;
};

class TaskManagerGateway {
 public:
  virtual ~TaskManagerGateway() = default;

  // Deploys each call's tasks. Per call, per task of its request in order:
  // OK (deployed) or why not; kAborted for a task not tried after an earlier
  // task of the same call failed.
  virtual std::vector<std::vector<absl::Status>> DeployTasks(absl::Span<const DeployTasksCall> calls) = 0;

  // Sends `request` (cancel a job attempt's tasks) to each address.
  virtual std::vector<absl::Status> CancelJobTasks(absl::Span<const std::string> addresses,
                                                   const v1::CancelJobTasksRequest& request) = 0;

  // Triggers a checkpoint at the source tasks of each call.
  virtual std::vector<TriggerCheckpointsResult> TriggerCheckpoints(absl::Span<const TriggerCheckpointsCall> calls) = 0;

  // Tells each TaskManager about a checkpoint (completed, aborted, or how a
  // stop-with-savepoint ends).
  virtual std::vector<absl::Status> NotifyCheckpoint(absl::Span<const TaskManagerAddress> taskmanagers,
                                                     const v1::NotifyCheckpointRequest& request) = 0;
};

// The per-task outcome of a DeployTasks call of `task_count` tasks that
// ended with `answer` (DeployTasks's contract): every task fails with a
// failed call; with an answer, the tasks before `deployed` are deployed,
// the one at it failed with the answer's error, the rest were not tried.
std::vector<absl::Status> DeployOutcomes(const absl::StatusOr<v1::DeployTasksResponse>& answer, int task_count);

}  // namespace weir::jobmanager
