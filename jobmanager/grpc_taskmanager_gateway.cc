#include "jobmanager/grpc_taskmanager_gateway.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/rpc/rpc.h"
#include "jobmanager/rpc_fan_out.h"

namespace weir::jobmanager {

GrpcTaskManagerGateway::GrpcTaskManagerGateway(CheckpointSessionFor checkpoint_session, int64_t leader_epoch)
    : checkpoint_session_(std::move(checkpoint_session)), leader_epoch_(absl::StrCat(leader_epoch)) {}

void GrpcTaskManagerGateway::Fence(grpc::ClientContext* context) const {
  context->AddMetadata(rpc::kLeaderEpochMetadata, leader_epoch_);
}

std::shared_ptr<v1::TaskExecutorService::Stub> GrpcTaskManagerGateway::StubFor(const std::string& address) {
  absl::MutexLock lock(&stubs_mu_);
  auto& stub = stubs_[address];
  if (stub == nullptr) stub = v1::TaskExecutorService::NewStub(rpc::CreateChannel(address));
  return stub;
}

std::shared_ptr<MembershipSession> GrpcTaskManagerGateway::CheckpointSession(
    const TaskManagerAddress& taskmanager) const {
  if (!checkpoint_session_) return nullptr;
  return checkpoint_session_(taskmanager.taskmanager_id, taskmanager.address);
}

std::vector<std::vector<absl::Status>> GrpcTaskManagerGateway::DeployTasks(absl::Span<const DeployTasksCall> calls) {
  RpcFanOut<v1::DeployTasksResponse> fan_out;
  for (const DeployTasksCall& call : calls) {
    // The TaskManager registered a moment ago: a connection that is slow to
    // open (hundreds open at once) is waited for, not a failed attempt.
    fan_out.Add(
        kDeployTimeout,
        [this, &call](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
          Fence(context);
          return StubFor(call.address)->PrepareAsyncDeployTasks(context, call.request, cq);
        },
        /*wait_for_ready=*/true);
  }
  const std::vector<RpcFanOut<v1::DeployTasksResponse>::Call> results = fan_out.Wait();
  // A TaskManager of an older version has no DeployTasks: one call per task.
  std::vector<size_t> one_by_one;  // indexes into calls
  for (size_t c = 0; c < calls.size(); ++c) {
    if (results[c].status.error_code() == grpc::StatusCode::UNIMPLEMENTED) one_by_one.push_back(c);
  }
  std::vector<RpcFanOut<v1::DeployTaskResponse>::Call> single_results;
  if (!one_by_one.empty()) {
    RpcFanOut<v1::DeployTaskResponse> singles;
    for (size_t c : one_by_one) {
      for (const v1::TaskDeploymentDescriptor& tdd : calls[c].request.tasks()) {
        singles.Add(
            kDeployTimeout,
            [this, &call = calls[c], &tdd](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
              Fence(context);
              return StubFor(call.address)->PrepareAsyncDeployTask(context, tdd, cq);
            },
            /*wait_for_ready=*/true);
      }
    }
    single_results = singles.Wait();
  }
  std::vector<std::vector<absl::Status>> outcomes;
  outcomes.reserve(calls.size());
  size_t next_single = 0;
  for (size_t c = 0; c < calls.size(); ++c) {
    const int task_count = calls[c].request.tasks_size();
    if (results[c].status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      std::vector<absl::Status>& mine = outcomes.emplace_back();
      for (int k = 0; k < task_count; ++k) mine.push_back(rpc::FromGrpcStatus(single_results[next_single++].status));
    } else if (!results[c].status.ok()) {
      outcomes.push_back(DeployOutcomes(rpc::FromGrpcStatus(results[c].status), task_count));
    } else {
      outcomes.push_back(DeployOutcomes(results[c].response, task_count));
    }
  }
  return outcomes;
}

std::vector<absl::Status> GrpcTaskManagerGateway::CancelJobTasks(absl::Span<const std::string> addresses,
                                                                 const v1::CancelJobTasksRequest& request) {
  RpcFanOut<v1::CancelJobTasksResponse> fan_out;
  for (const std::string& address : addresses) {
    fan_out.Add(kCancelTimeout, [this, &address, &request](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
      Fence(context);
      return StubFor(address)->PrepareAsyncCancelJobTasks(context, request, cq);
    });
  }
  std::vector<absl::Status> out;
  out.reserve(addresses.size());
  for (const auto& result : fan_out.Wait()) out.push_back(rpc::FromGrpcStatus(result.status));
  return out;
}

std::vector<TriggerCheckpointsResult> GrpcTaskManagerGateway::TriggerCheckpoints(
    absl::Span<const TriggerCheckpointsCall> calls) {
  std::vector<TriggerCheckpointsResult> out(calls.size());
  // A message on the membership session where the TaskManager takes it (it
  // declines the tasks it does not run); a call to the others.
  std::vector<size_t> called;  // indexes into calls
  v1::JobManagerMessage message;
  for (size_t c = 0; c < calls.size(); ++c) {
    if (std::shared_ptr<MembershipSession> session = CheckpointSession(calls[c].taskmanager)) {
      *message.mutable_trigger_checkpoints() = calls[c].request;
      if (session->Send(message)) continue;
      // The session ended meanwhile (nothing queued on it will arrive): a call.
    }
    called.push_back(c);
  }
  RpcFanOut<v1::TriggerCheckpointsResponse> fan_out;
  for (size_t c : called) {
    fan_out.Add(kTriggerTimeout, [this, &call = calls[c]](grpc::ClientContext* context, grpc::CompletionQueue* cq) {
      Fence(context);
      return StubFor(call.taskmanager.address)->PrepareAsyncTriggerCheckpoints(context, call.request, cq);
    });
  }
  const auto results = fan_out.Wait();
  // A TaskManager of an older version has no TriggerCheckpoints: one call per task.
  std::vector<std::pair<size_t, std::string>> singles_of;  // (index into calls, task id)
  std::vector<v1::TriggerCheckpointRequest> single_requests;
  for (size_t i = 0; i < called.size(); ++i) {
    const TriggerCheckpointsCall& call = calls[called[i]];
    TriggerCheckpointsResult& result = out[called[i]];
    const grpc::Status& status = results[i].status;
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      for (const std::string& task_id : call.request.task_ids()) {
        singles_of.emplace_back(called[i], task_id);
        v1::TriggerCheckpointRequest& single = single_requests.emplace_back();
        single.set_job_id(call.request.job_id());
        single.set_attempt(call.request.attempt());
        single.set_task_id(task_id);
        single.set_checkpoint_id(call.request.checkpoint_id());
        single.set_timestamp_unix_ms(call.request.timestamp_unix_ms());
        single.set_stop(call.request.stop());
      }
    } else if (!status.ok()) {
      result.status = rpc::FromGrpcStatus(status);
      if (call.request.task_ids_size() > 0) result.task_id = call.request.task_ids(0);
    } else if (results[i].response.not_found_task_ids_size() > 0) {
      result.status = absl::NotFoundError("no such task runs there (any more)");
      result.task_id = results[i].response.not_found_task_ids(0);
    }
  }
  if (!single_requests.empty()) {
    RpcFanOut<v1::TriggerCheckpointResponse> singles;
    for (size_t i = 0; i < single_requests.size(); ++i) {
      singles.Add(kTriggerTimeout, [this, &call = calls[singles_of[i].first], &single = single_requests[i]](
                                       grpc::ClientContext* context, grpc::CompletionQueue* cq) {
        Fence(context);
        return StubFor(call.taskmanager.address)->PrepareAsyncTriggerCheckpoint(context, single, cq);
      });
    }
    const auto single_results = singles.Wait();
    for (size_t i = 0; i < single_results.size(); ++i) {
      TriggerCheckpointsResult& result = out[singles_of[i].first];
      if (single_results[i].status.ok() || !result.status.ok()) continue;
      result.status = rpc::FromGrpcStatus(single_results[i].status);
      result.task_id = singles_of[i].second;
    }
  }
  return out;
}

std::vector<absl::Status> GrpcTaskManagerGateway::NotifyCheckpoint(absl::Span<const TaskManagerAddress> taskmanagers,
                                                                   const v1::NotifyCheckpointRequest& request) {
  std::vector<absl::Status> out(taskmanagers.size(), absl::OkStatus());
  // A message on the membership session where the TaskManager takes it, a
  // call to the others.
  std::vector<size_t> called;  // indexes into taskmanagers
  v1::JobManagerMessage message;
  *message.mutable_notify_checkpoint() = request;
  for (size_t t = 0; t < taskmanagers.size(); ++t) {
    std::shared_ptr<MembershipSession> session = CheckpointSession(taskmanagers[t]);
    if (session == nullptr || !session->Send(message)) called.push_back(t);
  }
  if (called.empty()) return out;
  RpcFanOut<v1::NotifyCheckpointResponse> fan_out;
  for (size_t t : called) {
    fan_out.Add(kNotifyTimeout, [this, &address = taskmanagers[t].address, &request](grpc::ClientContext* context,
                                                                                     grpc::CompletionQueue* cq) {
      Fence(context);
      return StubFor(address)->PrepareAsyncNotifyCheckpoint(context, request, cq);
    });
  }
  const auto results = fan_out.Wait();
  for (size_t i = 0; i < called.size(); ++i) out[called[i]] = rpc::FromGrpcStatus(results[i].status);
  return out;
}

}  // namespace weir::jobmanager
