#include "tests/testing/in_memory_taskmanager_gateway.h"

namespace weir::testing {

using jobmanager::DeployTasksCall;
using jobmanager::TaskManagerAddress;
using jobmanager::TriggerCheckpointsCall;
using jobmanager::TriggerCheckpointsResult;

absl::Status InMemoryTaskManagerGateway::NoAnswer() {
  return absl::DeadlineExceededError("no answer before the deadline (in-memory TaskManager gateway)");
}

v1::DeployTasksResponse InMemoryTaskManagerGateway::AllDeployed(const DeployTasksCall& call) {
  v1::DeployTasksResponse response;
  response.set_deployed(call.request.tasks_size());
  return response;
}

void InMemoryTaskManagerGateway::SetDeployAnswer(DeployAnswer answer) {
  absl::MutexLock lock(&mu_);
  deploy_answer_ = std::move(answer);
}

void InMemoryTaskManagerGateway::SetCancelAnswer(CancelAnswer answer) {
  absl::MutexLock lock(&mu_);
  cancel_answer_ = std::move(answer);
}

void InMemoryTaskManagerGateway::SetTriggerAnswer(TriggerAnswer answer) {
  absl::MutexLock lock(&mu_);
  trigger_answer_ = std::move(answer);
}

void InMemoryTaskManagerGateway::SetNotifyAnswer(NotifyAnswer answer) {
  absl::MutexLock lock(&mu_);
  notify_answer_ = std::move(answer);
}

std::vector<DeployTasksCall> InMemoryTaskManagerGateway::deploys() const {
  absl::MutexLock lock(&mu_);
  return deploys_;
}

std::vector<InMemoryTaskManagerGateway::CancelCall> InMemoryTaskManagerGateway::cancels() const {
  absl::MutexLock lock(&mu_);
  return cancels_;
}

std::vector<TriggerCheckpointsCall> InMemoryTaskManagerGateway::triggers() const {
  absl::MutexLock lock(&mu_);
  return triggers_;
}

std::vector<InMemoryTaskManagerGateway::NotifyCall> InMemoryTaskManagerGateway::notifications() const {
  absl::MutexLock lock(&mu_);
  return notifications_;
}

bool InMemoryTaskManagerGateway::AwaitDeploys(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return deploys_.size() >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool InMemoryTaskManagerGateway::AwaitCancels(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancels_.size() >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

bool InMemoryTaskManagerGateway::AwaitTriggers(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto enough = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return triggers_.size() >= count; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

std::vector<std::vector<absl::Status>> InMemoryTaskManagerGateway::DeployTasks(
    absl::Span<const DeployTasksCall> calls) {
  DeployAnswer answer;
  {
    absl::MutexLock lock(&mu_);
    answer = deploy_answer_;
    deploys_.insert(deploys_.end(), calls.begin(), calls.end());
  }
  std::vector<std::vector<absl::Status>> out;
  for (const DeployTasksCall& call : calls) {
    const absl::StatusOr<v1::DeployTasksResponse> response = answer ? answer(call) : AllDeployed(call);
    out.push_back(jobmanager::DeployOutcomes(response, call.request.tasks_size()));
  }
  return out;
}

std::vector<absl::Status> InMemoryTaskManagerGateway::CancelJobTasks(absl::Span<const std::string> addresses,
                                                                     const v1::CancelJobTasksRequest& request) {
  CancelAnswer answer;
  {
    absl::MutexLock lock(&mu_);
    answer = cancel_answer_;
    for (const std::string& address : addresses) cancels_.push_back({address, request});
  }
  std::vector<absl::Status> out;
  for (const std::string& address : addresses) out.push_back(answer ? answer(address, request) : absl::OkStatus());
  return out;
}

std::vector<TriggerCheckpointsResult> InMemoryTaskManagerGateway::TriggerCheckpoints(
    absl::Span<const TriggerCheckpointsCall> calls) {
  TriggerAnswer answer;
  {
    absl::MutexLock lock(&mu_);
    answer = trigger_answer_;
    triggers_.insert(triggers_.end(), calls.begin(), calls.end());
  }
  std::vector<TriggerCheckpointsResult> out;
  for (const TriggerCheckpointsCall& call : calls) out.push_back(answer ? answer(call) : TriggerCheckpointsResult{});
  return out;
}

std::vector<absl::Status> InMemoryTaskManagerGateway::NotifyCheckpoint(absl::Span<const TaskManagerAddress> taskmanagers,
                                                                       const v1::NotifyCheckpointRequest& request) {
  NotifyAnswer answer;
  {
    absl::MutexLock lock(&mu_);
    answer = notify_answer_;
    for (const TaskManagerAddress& taskmanager : taskmanagers) notifications_.push_back({taskmanager, request});
  }
  std::vector<absl::Status> out;
  for (const TaskManagerAddress& taskmanager : taskmanagers) {
    out.push_back(answer ? answer(taskmanager, request) : absl::OkStatus());
  }
  return out;
}

}  // namespace weir::testing
