// GrpcTaskManagerGateway: the TaskManagerGateway of the daemon. Each step
// reaches every TaskManager at once through an RpcFanOut on one TaskExecutor
// stub per address (cached for the gateway's life); checkpoint triggers and
// notifications go as messages on a TaskManager's membership session where
// it takes them there (ResourceManager::CheckpointMessageSession), as calls
// to the others.
//
// Fencing: every call carries the JobManager's leader epoch as the
// rpc::kLeaderEpochMetadata metadata, so a TaskManager that registered with
// a later JobManager refuses it (messages on a membership session need
// none: the session is the TaskManager's registration itself).
//
// Deadlines: deployments 30 s (waiting for a connection still opening),
// cancellations 5 s, triggers 5 s, notifications 2 s.
//
// Thread-safety: thread-safe (TaskManagerGateway's contract).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/logging/logging.h"
#include "jobmanager/resource_manager.h"
#include "jobmanager/taskmanager_gateway.h"
#include "weir/v1/cluster.grpc.pb.h"

namespace weir::jobmanager {

class GrpcTaskManagerGateway : public TaskManagerGateway {
 public:
  // The membership session that takes checkpoint triggers and notifications
  // for TaskManager (id, address), or null (a call instead).
  using CheckpointSessionFor =
      std::function<std::shared_ptr<MembershipSession>(const std::string& taskmanager_id, const std::string& address)>;

  static constexpr absl::Duration kDeployTimeout = jobmanager::kDeployTimeout;
  static constexpr absl::Duration kCancelTimeout = absl::Seconds(5);
  static constexpr absl::Duration kTriggerTimeout = absl::Seconds(5);
  static constexpr absl::Duration kNotifyTimeout = absl::Seconds(2);

  // `checkpoint_session` unset: every trigger and notification is a call.
  // `leader_epoch`: the fencing token every call carries.
  explicit GrpcTaskManagerGateway(CheckpointSessionFor checkpoint_session = nullptr, int64_t leader_epoch = 0);

  std::vector<std::vector<absl::Status>> DeployTasks(absl::Span<const DeployTasksCall> calls) override;
  std::vector<absl::Status> CancelJobTasks(absl::Span<const std::string> addresses,
                                           const v1::CancelJobTasksRequest& request) override;
  std::vector<TriggerCheckpointsResult> TriggerCheckpoints(absl::Span<const TriggerCheckpointsCall> calls) override;
  std::vector<absl::Status> NotifyCheckpoint(absl::Span<const TaskManagerAddress> taskmanagers,
                                             const v1::NotifyCheckpointRequest& request) override;

 private:
  std::shared_ptr<v1::TaskExecutorService::Stub> StubFor(const std::string& address) ABSL_LOCKS_EXCLUDED(stubs_mu_);
  // checkpoint_session_'s, null when there is none.
  std::shared_ptr<MembershipSession> CheckpointSession(const TaskManagerAddress& taskmanager) const;

  // Adds the fencing token to a call's metadata.
  void Fence(grpc::ClientContext* context) const;

  const CheckpointSessionFor checkpoint_session_;
  const std::string leader_epoch_;  // decimal, as sent
  absl::Mutex stubs_mu_;
  std::map<std::string, std::shared_ptr<v1::TaskExecutorService::Stub>> stubs_ ABSL_GUARDED_BY(stubs_mu_);
};

}  // namespace weir::jobmanager
