#include "jobmanager/resource_manager_service.h"

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging/logging.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"

namespace weir::jobmanager {
namespace {

using Reactor = grpc::ServerBidiReactor<v1::TaskManagerMessage, v1::JobManagerMessage>;

// What the registry and the job masters hold of a session: queues what they
// send and hands it to the reactor one write at a time (gRPC allows one
// outstanding), so that Send never waits for the TaskManager. It outlives
// the reactor (the registry may drop it a little later) and refuses once
// the reactor is done. The call's Finish is issued once, after the write
// in flight ends: the reactor, and the context, live at least until then.
//
// Thread-safety: all methods are thread-safe. The reactor's operations are
// started without mu_ held: gRPC may run a reaction (which takes mu_) on
// the thread that starts one.
class Outbox final : public MembershipSession {
 public:
  // More than this waiting: the TaskManager stopped reading (a hung
  // process whose connection stays up). The session is closed then (the
  // TaskManager is lost, as at its heartbeat timeout) rather than letting a
  // caller's message overtake the queued ones by another way.
  static constexpr size_t kMaxQueued = 1024;

  Outbox(Reactor* reactor, grpc::CallbackServerContext* context) : reactor_(reactor), context_(context) {}

  // Cancels the call unless its Finish went already: an outstanding write
  // or read ends at once (the TaskManager may have stopped reading), then
  // it is finished.
  void Close() override ABSL_LOCKS_EXCLUDED(mu_) {
    Reactor* reactor = nullptr;
    grpc::CallbackServerContext* context = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || finish_issued_ || cancelling_) return;
      if (!finish_.has_value()) finish_ = grpc::Status(grpc::StatusCode::CANCELLED, "session closed by the JobManager");
      reactor = reactor_;
      context = context_;
      if (!writing_) finished_ = true;
      cancelling_ = true;  // no Finish (so the context stays) until TryCancel returned
    }
    context->TryCancel();
    {
      absl::MutexLock lock(&mu_);
      cancelling_ = false;
    }
    FinishIfDue(reactor);
  }

  // Queues `message` once the session is open (its `accepted` queued
  // first); false when it is not, or has ended.
  bool Send(const v1::JobManagerMessage& message) override ABSL_LOCKS_EXCLUDED(mu_) {
    return Enqueue(message, Gate::kWhenOpen);
  }
  // The registration's answer: `accepted` opens the session to Send (so
  // that nothing reaches the TaskManager before it), `rejected` does not.
  bool Answer(const v1::JobManagerMessage& message) ABSL_LOCKS_EXCLUDED(mu_) {
    return Enqueue(message, message.has_accepted() ? Gate::kOpens : Gate::kBeforeOpen);
  }

  // The last write ended: starts the next, or the Finish waiting for it.
  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    Reactor* reactor = nullptr;
    const v1::JobManagerMessage* next = nullptr;
    {
      absl::MutexLock lock(&mu_);
      reactor = reactor_;
      queue_.pop_front();
      if (!ok) broken_ = true;  // the stream is gone; the read side ends the session
      if (!broken_ && !queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        if (finish_.has_value() && !finished_) finished_ = true;
      }
    }
    if (next != nullptr) {
      reactor->StartWrite(next);
    } else {
      FinishIfDue(reactor);
    }
  }

  // Ends the call with `status` once what is queued is written (at once
  // when the stream broke). Later calls change nothing.
  void Finish(grpc::Status status) ABSL_LOCKS_EXCLUDED(mu_) {
    Reactor* reactor = nullptr;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || finish_.has_value()) return;
      finish_ = std::move(status);
      reactor = reactor_;
      if (!writing_) finished_ = true;
    }
    FinishIfDue(reactor);
  }

  bool finishing() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return finish_.has_value();
  }
  // Closed because kMaxQueued messages waited.
  bool overflowed() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return overflowed_;
  }
  // For the log: whose session this is, once registered.
  void SetTaskManager(std::string taskmanager_id) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    taskmanager_id_ = std::move(taskmanager_id);
  }

  // The reactor is done: nothing reaches it after this.
  void Detach() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
    context_ = nullptr;
  }

 private:
  enum class Gate { kBeforeOpen, kOpens, kWhenOpen };

  bool Enqueue(const v1::JobManagerMessage& message, Gate gate) ABSL_LOCKS_EXCLUDED(mu_) {
    Reactor* reactor = nullptr;
    const v1::JobManagerMessage* start = nullptr;
    bool overflow = false;
    std::string who;
    {
      absl::MutexLock lock(&mu_);
      if (reactor_ == nullptr || broken_ || finish_.has_value()) return false;
      if (gate == Gate::kWhenOpen && !open_) return false;
      if (queue_.size() >= kMaxQueued) {
        overflow = true;
        overflowed_ = true;
        who = taskmanager_id_;
      } else {
        queue_.push_back(message);
        if (gate == Gate::kOpens) open_ = true;
        if (!writing_) {
          writing_ = true;
          reactor = reactor_;
          start = &queue_.front();
        }
      }
    }
    if (overflow) {
      logging::Get("resourcemanager")
          ->warn("TaskManager {}'s membership session has {} messages waiting: it stopped reading; closing the "
                 "session (the TaskManager is lost, and registers again once it reads)",
                 who, kMaxQueued);
      Close();
      return false;
    }
    if (start != nullptr) reactor->StartWrite(start);
    return true;
  }

  // Issues the Finish once finished_ is set and no TryCancel is under way;
  // only one caller issues it.
  void FinishIfDue(Reactor* reactor) ABSL_LOCKS_EXCLUDED(mu_) {
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (!finished_ || finish_issued_ || cancelling_) return;
      finish_issued_ = true;
      status = *finish_;
    }
    reactor->Finish(status);
  }

  mutable absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_);
  grpc::CallbackServerContext* context_ ABSL_GUARDED_BY(mu_);
  // Front: the message being written while writing_.
  std::deque<v1::JobManagerMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool open_ ABSL_GUARDED_BY(mu_) = false;  // `accepted` is queued
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // The status to finish with, once asked; finished_: no write in flight
  // any more, so Finish may go; finish_issued_: it went.
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_issued_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelling_ ABSL_GUARDED_BY(mu_) = false;  // Close is in TryCancel
  bool overflowed_ ABSL_GUARDED_BY(mu_) = false;
  std::string taskmanager_id_ ABSL_GUARDED_BY(mu_);
};

// One TaskManager's session: the first message must register it, then
// heartbeats (each acknowledged) until it deregisters or the stream ends.
// Reads one message at a time; OnReadDone runs on gRPC's threads and only
// takes the registry's lock briefly.
class MembershipReactor final : public Reactor {
 public:
  // The detail of the loss of a TaskManager whose session overflowed.
  static constexpr char kStoppedReading[] = "it stopped reading its session";

  MembershipReactor(ResourceManager* resource_manager, absl::Duration heartbeat_interval, LeadershipGate* gate,
                    grpc::CallbackServerContext* context)
      : resource_manager_(resource_manager),
        heartbeat_interval_(heartbeat_interval),
        gate_(gate),
        context_(context),
        outbox_(std::make_shared<Outbox>(this, context)) {
    if (grpc::Status auth = rpc::Authorize(context); !auth.ok()) {
      outbox_->Finish(auth);
      return;
    }
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The stream ended: the TaskManager's process or connection went away
      // (or the registry closed the session, in which case this is a no-op).
      if (epoch_.has_value()) {
        resource_manager_->Unregister(id_, *epoch_, LossReason::kConnectionClosed,
                                      outbox_->overflowed() ? kStoppedReading : "");
      }
      outbox_->Finish(grpc::Status(grpc::StatusCode::CANCELLED, epoch_.has_value()
                                                                    ? "session closed"
                                                                    : "session closed before registering"));
      return;
    }
    if (epoch_.has_value()) {
      OnMessage();
    } else {
      OnRegistration();
    }
    if (!outbox_->finishing()) {
      StartRead(&in_);
    } else if (epoch_.has_value() && outbox_->overflowed()) {
      // No read follows, so no end of stream will tell the registry that
      // the acknowledgement just queued closed the session: the
      // TaskManager stopped reading. (Every other end of a registered
      // session unregisters it where it happens, or is the registry's own.)
      resource_manager_->Unregister(id_, *epoch_, LossReason::kConnectionClosed, kStoppedReading);
    }
  }

  void OnWriteDone(bool ok) override { outbox_->OnWriteDone(ok); }

  void OnDone() override {
    outbox_->Detach();
    delete this;
  }

 private:
  void OnRegistration() {
    if (!in_.has_register_()) {
      outbox_->Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a session must register"));
      return;
    }
    if (gate_ != nullptr) {
      // A standby answers with the leader's address (trailing metadata
      // weir-leader), which the TaskManager registers with next.
      if (grpc::Status standby = gate_->Check(context_, "registration"); !standby.ok()) {
        v1::JobManagerMessage rejected;
        rejected.mutable_rejected()->set_reason(standby.error_message());
        outbox_->Answer(rejected);
        outbox_->Finish(standby);
        return;
      }
    }
    absl::StatusOr<uint64_t> epoch = resource_manager_->Register(in_.register_(), outbox_);
    if (!epoch.ok()) {
      v1::JobManagerMessage rejected;
      rejected.mutable_rejected()->set_reason(std::string(epoch.status().message()));
      outbox_->Answer(rejected);
      outbox_->Finish(rpc::ToGrpcStatus(epoch.status()));
      return;
    }
    id_ = in_.register_().info().taskmanager_id();
    epoch_ = *epoch;
    outbox_->SetTaskManager(id_);
    v1::JobManagerMessage accepted;
    accepted.mutable_accepted()->set_jobmanager_session_id(resource_manager_->session_id());
    accepted.mutable_accepted()->set_leader_epoch(resource_manager_->leader_epoch());
    accepted.mutable_accepted()->set_heartbeat_interval_ms(absl::ToInt64Milliseconds(heartbeat_interval_));
    accepted.mutable_accepted()->set_heartbeat_timeout_ms(
        absl::ToInt64Milliseconds(resource_manager_->heartbeat_timeout()));
    if (!outbox_->Answer(accepted)) {
      resource_manager_->Unregister(id_, *epoch_, LossReason::kConnectionClosed, "while accepting registration");
      outbox_->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "session closed"));
    }
  }

  void OnMessage() {
    if (in_.has_heartbeat()) {
      absl::Status status = resource_manager_->Heartbeat(id_, *epoch_, in_.heartbeat().slots());
      if (!status.ok()) {
        // A no-op when the registration is already gone (kNotFound).
        resource_manager_->Unregister(id_, *epoch_, LossReason::kConnectionClosed, status.message());
        outbox_->Finish(rpc::ToGrpcStatus(status));
        return;
      }
      v1::JobManagerMessage ack;
      ack.mutable_heartbeat_ack()->set_sequence(in_.heartbeat().sequence());
      // Refused only when the stream is going (the read side sees that) or
      // the TaskManager reads nothing (its heartbeat timeout will tell).
      outbox_->Send(ack);
    } else if (in_.has_deregister()) {
      resource_manager_->Unregister(id_, *epoch_, LossReason::kDeregistered, in_.deregister().reason());
      outbox_->Finish(grpc::Status::OK);
    } else {
      resource_manager_->Unregister(id_, *epoch_, LossReason::kConnectionClosed, "protocol error");
      outbox_->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "unexpected message on a registered session"));
    }
  }

  ResourceManager* const resource_manager_;
  const absl::Duration heartbeat_interval_;
  LeadershipGate* const gate_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<Outbox> outbox_;
  v1::TaskManagerMessage in_;
  std::string id_;
  std::optional<uint64_t> epoch_;  // once registered
};

}  // namespace

ResourceManagerServiceImpl::ResourceManagerServiceImpl(ResourceManager* resource_manager,
                                                       absl::Duration heartbeat_interval, LeadershipGate* gate)
    : resource_manager_(resource_manager), heartbeat_interval_(heartbeat_interval), gate_(gate) {}

grpc::ServerBidiReactor<v1::TaskManagerMessage, v1::JobManagerMessage>* ResourceManagerServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new MembershipReactor(resource_manager_, heartbeat_interval_, gate_, context);
}

grpc::Status ClusterServiceImpl::ListTaskManagers(grpc::ServerContext* context, const v1::ListTaskManagersRequest*,
                                                  v1::ListTaskManagersResponse* response) {
  WEIR_RPC_AUTHORIZE(context);
  WEIR_RPC_REQUIRE_LEADER(gate_, context, "listing the cluster");
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
