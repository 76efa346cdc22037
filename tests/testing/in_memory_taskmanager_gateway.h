// InMemoryTaskManagerGateway: a TaskManagerGateway for driving a JobMaster
// in-process, with no TaskManager behind it. It records every call, and the
// test decides each answer (by default: OK, every task deployed); a call is
// recorded before it is answered. The test
// then reports task states to the JobMaster itself (OnTaskStateUpdate,
// OnTaskManagerLost), as TaskManagers would.
//
// "No answer" is an answer like any other: return NoAnswer() (what the gRPC
// gateway gives once a deadline passed) — the fake never waits.
//
// Thread-safety: thread-safe. The JobMaster calls it from its worker and
// coordinator threads while the test thread sets answers and reads the
// record. Answers run on the calling JobMaster thread, without the fake's
// lock held, so an answer may call back into the JobMaster.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "jobmanager/taskmanager_gateway.h"

namespace weir::testing {

class InMemoryTaskManagerGateway : public jobmanager::TaskManagerGateway {
 public:
  using DeployAnswer = std::function<absl::StatusOr<v1::DeployTasksResponse>(const jobmanager::DeployTasksCall&)>;
  using CancelAnswer = std::function<absl::Status(const std::string& address, const v1::CancelJobTasksRequest&)>;
  using TriggerAnswer =
      std::function<jobmanager::TriggerCheckpointsResult(const jobmanager::TriggerCheckpointsCall&)>;
  using NotifyAnswer =
      std::function<absl::Status(const jobmanager::TaskManagerAddress&, const v1::NotifyCheckpointRequest&)>;

  struct CancelCall {
    std::string address;
    v1::CancelJobTasksRequest request;
  };
  struct NotifyCall {
    jobmanager::TaskManagerAddress taskmanager;
    v1::NotifyCheckpointRequest request;
  };

  // What a TaskManager that never answered gives (kDeadlineExceeded).
  static absl::Status NoAnswer();
  // A DeployTasks answer: every task of `call` deployed.
  static v1::DeployTasksResponse AllDeployed(const jobmanager::DeployTasksCall& call);

  // Replace the answer to every later call of that kind (null: the default).
  void SetDeployAnswer(DeployAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);
  void SetCancelAnswer(CancelAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);
  void SetTriggerAnswer(TriggerAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);
  void SetNotifyAnswer(NotifyAnswer answer) ABSL_LOCKS_EXCLUDED(mu_);

  // Every call so far, one entry per TaskManager addressed, in order.
  std::vector<jobmanager::DeployTasksCall> deploys() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<CancelCall> cancels() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<jobmanager::TriggerCheckpointsCall> triggers() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<NotifyCall> notifications() const ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until at least `count` calls of that kind were recorded, up to
  // `timeout`; whether they were.
  bool AwaitDeploys(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitCancels(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);
  bool AwaitTriggers(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

  // TaskManagerGateway.
  std::vector<std::vector<absl::Status>> DeployTasks(absl::Span<const jobmanager::DeployTasksCall> calls) override
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<absl::Status> CancelJobTasks(absl::Span<const std::string> addresses,
                                           const v1::CancelJobTasksRequest& request) override ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<jobmanager::TriggerCheckpointsResult> TriggerCheckpoints(
      absl::Span<const jobmanager::TriggerCheckpointsCall> calls) override ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<absl::Status> NotifyCheckpoint(absl::Span<const jobmanager::TaskManagerAddress> taskmanagers,
                                             const v1::NotifyCheckpointRequest& request) override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  DeployAnswer deploy_answer_ ABSL_GUARDED_BY(mu_);
  CancelAnswer cancel_answer_ ABSL_GUARDED_BY(mu_);
  TriggerAnswer trigger_answer_ ABSL_GUARDED_BY(mu_);
  NotifyAnswer notify_answer_ ABSL_GUARDED_BY(mu_);
  std::vector<jobmanager::DeployTasksCall> deploys_ ABSL_GUARDED_BY(mu_);
  std::vector<CancelCall> cancels_ ABSL_GUARDED_BY(mu_);
  std::vector<jobmanager::TriggerCheckpointsCall> triggers_ ABSL_GUARDED_BY(mu_);
  std::vector<NotifyCall> notifications_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::testing
