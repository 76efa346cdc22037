#include "jobmanager/resource_manager_service.h"

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"

namespace weir::jobmanager {
namespace {

class GrpcMembershipSession final : public MembershipSession {
 public:
  using Stream = grpc::ServerReaderWriter<v1::JobManagerMessage, v1::TaskManagerMessage>;
  GrpcMembershipSession(grpc::ServerContext* context, Stream* stream) : context_(context), stream_(stream) {}

  void Close() override { context_->TryCancel(); }

  bool Send(const v1::JobManagerMessage& message) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(message);
  }

  // The handler returns: no Send reaches the stream after this (one under
  // way is waited for).
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  grpc::ServerContext* const context_;
  // One writer at a time (the handler's acknowledgements, the job masters'
  // checkpoint messages); the handler reads concurrently, which gRPC allows.
  absl::Mutex mu_;
  Stream* stream_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

ResourceManagerServiceImpl::ResourceManagerServiceImpl(ResourceManager* resource_manager,
                                                       absl::Duration heartbeat_interval)
    : resource_manager_(resource_manager), heartbeat_interval_(heartbeat_interval) {}

grpc::Status ResourceManagerServiceImpl::Connect(
    grpc::ServerContext* context, grpc::ServerReaderWriter<v1::JobManagerMessage, v1::TaskManagerMessage>* stream) {
  WEIR_RPC_AUTHORIZE(context);
  v1::TaskManagerMessage message;
  if (!stream->Read(&message)) return grpc::Status(grpc::StatusCode::CANCELLED, "session closed before registering");
  if (!message.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a session must register");
  }
  auto session = std::make_shared<GrpcMembershipSession>(context, stream);
  // The registry may keep the session past this handler; the stream may not.
  const absl::Cleanup detach = [&session] { session->Detach(); };
  absl::StatusOr<uint64_t> epoch = resource_manager_->Register(message.register_(), session);
  if (!epoch.ok()) {
    v1::JobManagerMessage rejected;
    rejected.mutable_rejected()->set_reason(std::string(epoch.status().message()));
    session->Send(rejected);
    return rpc::ToGrpcStatus(epoch.status());
  }
  const std::string id = message.register_().info().taskmanager_id();

  v1::JobManagerMessage accepted;
  accepted.mutable_accepted()->set_jobmanager_session_id(resource_manager_->session_id());
  accepted.mutable_accepted()->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
  accepted.mutable_accepted()->set_heartbeat_timeout_ms(
      absl::ToInt64Milliseconds(resource_manager_->heartbeat_timeout()));
  if (!session->Send(accepted)) {
    resource_manager_->Unregister(id, *epoch, LossReason::kConnectionClosed, "while accepting registration");
    return grpc::Status(grpc::StatusCode::CANCELLED, "session closed");
  }

  while (stream->Read(&message)) {
    if (message.has_heartbeat()) {
      absl::Status status = resource_manager_->Heartbeat(id, *epoch, message.heartbeat().slots());
      if (!status.ok()) {
        // A no-op when the registration is already gone (kNotFound).
        resource_manager_->Unregister(id, *epoch, LossReason::kConnectionClosed, status.message());
        return rpc::ToGrpcStatus(status);
      }
      v1::JobManagerMessage ack;
      ack.mutable_heartbeat_ack()->set_sequence(message.heartbeat().sequence());
      if (!session->Send(ack)) break;
    } else if (message.has_deregister()) {
      resource_manager_->Unregister(id, *epoch, LossReason::kDeregistered, message.deregister().reason());
      return grpc::Status::OK;
    } else {
      resource_manager_->Unregister(id, *epoch, LossReason::kConnectionClosed, "protocol error");
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unexpected message on a registered session");
    }
  }
  // The stream ended: the TaskManager's process or connection went away (or
  // the registry closed the session, in which case this is a no-op).
  resource_manager_->Unregister(id, *epoch, LossReason::kConnectionClosed, "");
  return grpc::Status(grpc::StatusCode::CANCELLED, "session closed");
}

grpc::Status ClusterServiceImpl::ListTaskManagers(grpc::ServerContext* context, const v1::ListTaskManagersRequest*,
                                                  v1::ListTaskManagersResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  absl::Time now = absl::Now();
  response->set_jobmanager_session_id(resource_manager_->session_id());
  for (const TaskManagerRecord& record : resource_manager_->List()) {
    v1::TaskManagerStatus* status = response->add_taskmanagers();
    *status->mutable_info() = record.info;
    *status->mutable_slots() = record.slots;
    // Allocation is decided here, so the JobManager's view of free slots wins.
    status->mutable_slots()->set_slots_total(record.info.slots_total());
    status->mutable_slots()->set_slots_free(record.free_slots());
    status->set_seconds_since_heartbeat(absl::ToDoubleSeconds(now - record.last_heartbeat));
    status->set_registered_at_unix_ms(absl::ToUnixMillis(record.registered_at));
  }
  return grpc::Status::OK;
}

}  // namespace weir::jobmanager
