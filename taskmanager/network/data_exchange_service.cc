#include "taskmanager/network/data_exchange_service.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging/logging.h"
#include "grpcpp/alarm.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"

namespace weir::taskmanager::network {
namespace {

grpc::Status Error(grpc::StatusCode code, std::string message) { return grpc::Status(code, std::move(message)); }

}  // namespace

v1::DataBuffer ToProto(Buffer buffer) {
  v1::DataBuffer message;
  switch (buffer.kind) {
    case Buffer::Kind::kData:
      message.set_kind(v1::BUFFER_KIND_DATA);
      message.set_data(std::move(buffer.data));
      message.set_record_count(buffer.record_count);
      break;
    case Buffer::Kind::kEndOfInput:
      message.set_kind(v1::BUFFER_KIND_END_OF_INPUT);
      break;
    case Buffer::Kind::kBarrier:
      message.set_kind(v1::BUFFER_KIND_CHECKPOINT_BARRIER);
      message.set_checkpoint_id(buffer.checkpoint_id);
      message.set_checkpoint_timestamp_unix_ms(buffer.checkpoint_timestamp_ms);
      break;
    case Buffer::Kind::kTimestampedData:
      message.set_kind(v1::BUFFER_KIND_TIMESTAMPED_DATA);
      message.set_data(std::move(buffer.data));
      message.set_record_count(buffer.record_count);
      break;
    case Buffer::Kind::kWatermark:
      message.set_kind(v1::BUFFER_KIND_WATERMARK);
      message.set_watermark_ms(buffer.watermark);
      break;
    case Buffer::Kind::kWatermarkStatus:
      message.set_kind(v1::BUFFER_KIND_WATERMARK_STATUS);
      message.set_idle(buffer.idle);
      break;
    case Buffer::Kind::kEndOfData:
      message.set_kind(v1::BUFFER_KIND_END_OF_DATA);
      message.set_final_checkpoint(buffer.final_checkpoint);
      break;
  }
  return message;
}

absl::StatusOr<Buffer> FromProto(v1::DataBuffer message) {
  switch (message.kind()) {
    case v1::BUFFER_KIND_DATA:
    case v1::BUFFER_KIND_TIMESTAMPED_DATA:
      if (message.record_count() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("data buffer with a negative record count ", message.record_count()));
      }
      return Buffer{message.kind() == v1::BUFFER_KIND_DATA ? Buffer::Kind::kData : Buffer::Kind::kTimestampedData,
                    std::move(*message.mutable_data()), message.record_count()};
    case v1::BUFFER_KIND_WATERMARK:
      return Buffer::Watermark(message.watermark_ms());
    case v1::BUFFER_KIND_WATERMARK_STATUS:
      return Buffer::WatermarkStatus(message.idle());
    case v1::BUFFER_KIND_END_OF_INPUT:
      return Buffer::EndOfInput();
    case v1::BUFFER_KIND_END_OF_DATA:
      return Buffer::EndOfData(message.final_checkpoint());
    case v1::BUFFER_KIND_CHECKPOINT_BARRIER:
      if (message.checkpoint_id() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint barrier with id ", message.checkpoint_id()));
      }
      return Buffer::Barrier(message.checkpoint_id(), message.checkpoint_timestamp_unix_ms());
    default:
      return absl::InvalidArgumentError(absl::StrCat("buffer of unknown kind ", static_cast<int>(message.kind())));
  }
}

// One Subscribe call, from its offer to the server until its last
// completion. Its phases: offered (waiting for a call), subscribing (reading
// the subscription), waiting (for the partition to be registered), serving
// (sending against credit), draining (END_OF_INPUT sent, waiting for the
// consumer's half-close), finishing. One read is in flight from the
// subscription on, so a consumer that goes away is noticed in every phase.
//
// Thread-safety: completions run on the stream's network thread; Wake comes
// from producer task threads (buffer added, partition released), from the
// registering thread and from Shutdown. Everything is under mu_. The stream
// keeps itself alive (self_) while operations are in flight; listeners hold
// weak pointers.
class DataExchangeServiceImpl::Stream : public std::enable_shared_from_this<Stream> {
 public:
  enum class Op { kAccept, kRead, kWrite, kWake, kPartitionTimer, kGraceTimer, kFinish };

  Stream(DataExchangeServiceImpl* service, grpc::ServerCompletionQueue* queue)
      : service_(service), queue_(queue), stream_(&context_) {}
  ~Stream() {
    absl::MutexLock lock(&service_->mu_);
    --service_->live_;
  }

  // Offers the stream to the server for the next Subscribe call.
  void Offer() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    BeginLocked();
    service_->RequestSubscribe(&context_, &stream_, queue_, queue_, &accept_done_);
  }

  // Something may have changed (see the class comment).
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    WakeLocked();
  }

  void ShutDown() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    WakeLocked();
  }

  void OnCompletion(Op op, bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Stream> last_reference;
    bool accepted = false;
    {
      absl::MutexLock lock(&mu_);
      --ops_;
      switch (op) {
        case Op::kAccept:
          accepted = ok;
          if (ok) OnAcceptedLocked();
          break;
        case Op::kRead:
          reading_ = false;
          OnReadLocked(ok);
          break;
        case Op::kWrite:
          writing_ = false;
          OnWrittenLocked(ok);
          break;
        case Op::kWake:
          wake_armed_ = false;
          OnWakeLocked();
          break;
        case Op::kPartitionTimer:
          if (ok && phase_ == Phase::kSubscribing) {
            FinishLocked(Error(grpc::StatusCode::DEADLINE_EXCEEDED,
                               absl::StrCat("no subscription arrived within ",
                                            absl::FormatDuration(service_->options_.partition_wait),
                                            " of opening the stream")));
          } else if (ok && phase_ == Phase::kWaiting && !ResolveLocked()) {
            FinishLocked(Error(grpc::StatusCode::NOT_FOUND,
                               absl::StrCat("result partition ", partition_id_, " is not registered on this "
                                            "TaskManager (waited ",
                                            absl::FormatDuration(service_->options_.partition_wait), ")")));
          }
          break;
        case Op::kGraceTimer:
          // The consumer has END_OF_INPUT but never half-closed: end anyway.
          if (ok && phase_ == Phase::kDraining) FinishLocked(grpc::Status::OK);
          break;
        case Op::kFinish:
          OnFinishedLocked();
          break;
      }
      if (ops_ == 0) last_reference = std::move(self_);
    }
    if (accepted) service_->Accept(queue_);
    // last_reference goes last: it may destroy this stream.
  }

 private:
  using Completion = OpCompletion<Stream, Op>;
  enum class Phase { kOffered, kSubscribing, kWaiting, kServing, kDraining, kFinishing };

  void BeginLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ops_++ == 0) self_ = shared_from_this();
  }

  void WakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (wake_armed_ || phase_ == Phase::kOffered || phase_ == Phase::kFinishing) return;
    wake_armed_ = true;
    BeginLocked();
    wake_.Set(queue_, std::chrono::system_clock::now(), &wake_done_);
  }

  void ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reading_ = true;
    BeginLocked();
    stream_.Read(&incoming_, &read_done_);
  }

  // Each phase that waits has an alarm of its own, set at most once.
  void SetTimerLocked(grpc::Alarm& alarm, Completion& done, absl::Duration after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BeginLocked();
    alarm.Set(queue_, absl::ToChronoTime(absl::Now() + after), &done);
  }
  void CancelTimersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Cancelling one that fired has no effect; its completion comes back
    // not ok otherwise.
    if (partition_timer_set_) partition_timer_.Cancel();
    if (grace_timer_set_) grace_timer_.Cancel();
  }

  void OnAcceptedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    peer_ = context_.peer();
    {
      absl::MutexLock lock(&service_->mu_);
      service_->active_.insert(this);
      if (service_->shutting_down_) shutdown_ = true;
    }
    registered_ = true;
    phase_ = Phase::kSubscribing;
    grpc::Status authorized = rpc::Authorize(&context_);
    if (!authorized.ok()) {
      FinishLocked(authorized);
      return;
    }
    if (shutdown_) {
      FinishLocked(Error(grpc::StatusCode::UNAVAILABLE, "the TaskManager is shutting down"));
      return;
    }
    // Until it is served, a stream counts against the bound on waiting
    // ones, and has partition_wait to subscribe and find its partition.
    {
      absl::MutexLock lock(&service_->mu_);
      if (service_->waiting_ >= service_->options_.max_waiting_streams) {
        FinishLocked(Error(grpc::StatusCode::RESOURCE_EXHAUSTED,
                           absl::StrCat("this TaskManager already has ", service_->waiting_,
                                        " subscriptions waiting for their partitions (the most it keeps, "
                                        "taskmanager.network.max-waiting-subscriptions); subscribe again later")));
        return;
      }
      ++service_->waiting_;
      counted_waiting_ = true;
    }
    partition_timer_set_ = true;
    SetTimerLocked(partition_timer_, partition_timer_done_, service_->options_.partition_wait);
    ReadLocked();
  }

  void OnReadLocked(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ == Phase::kFinishing) return;
    if (phase_ == Phase::kSubscribing) {
      if (!ok) {
        FinishLocked(Error(grpc::StatusCode::CANCELLED, "the consumer closed the stream before subscribing"));
        return;
      }
      OnSubscribeLocked();
      return;
    }
    if (!ok) {  // the consumer half-closed or went away
      if (phase_ == Phase::kDraining) {
        FinishLocked(grpc::Status::OK);
      } else {
        FinishLocked(Error(grpc::StatusCode::CANCELLED, "the consumer closed the stream before end of input"));
      }
      return;
    }
    if (!incoming_.has_credit() || incoming_.credit() <= 0) {
      FinishLocked(Error(grpc::StatusCode::INVALID_ARGUMENT,
                         "after subscribing, a consumer may only send positive credit"));
      return;
    }
    credit_ += incoming_.credit();
    ReadLocked();
    PumpLocked();
  }

  void OnSubscribeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!incoming_.has_subscribe()) {
      FinishLocked(
          Error(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a Subscribe stream must subscribe"));
      return;
    }
    const v1::Subscription& subscription = incoming_.subscribe();
    partition_id_ = subscription.partition_id();
    subpartition_ = subscription.subpartition();
    const int max_credit = service_->options_.max_initial_credit;
    if (partition_id_.empty()) {
      FinishLocked(Error(grpc::StatusCode::INVALID_ARGUMENT, "subscription without a partition id"));
      return;
    }
    if (subpartition_ < 0) {
      FinishLocked(Error(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("negative subpartition ", subpartition_)));
      return;
    }
    if (subscription.initial_credit() < 1 || subscription.initial_credit() > max_credit) {
      FinishLocked(Error(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("initial credit ", subscription.initial_credit(), " is not in [1, ",
                                      max_credit, "]")));
      return;
    }
    credit_ = subscription.initial_credit();
    ReadLocked();  // credit, or the consumer going away
    if (ResolveLocked()) return;
    // Not registered yet: wait for it (until the partition timer).
    phase_ = Phase::kWaiting;
    std::weak_ptr<Stream> weak = shared_from_this();
    registration_listener_ = service_->partitions_->AddRegistrationListener(partition_id_, [weak] {
      if (std::shared_ptr<Stream> stream = weak.lock()) stream->Wake();
    });
    // Registered between the lookup and the listener?
    ResolveLocked();
  }

  // Attaches to the partition once it is registered; true when the stream is
  // serving or has ended.
  bool ResolveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::shared_ptr<ResultPartition> partition = service_->partitions_->Lookup(partition_id_);
    if (partition == nullptr) return false;
    StopWaitingLocked();
    if (subpartition_ >= partition->num_subpartitions()) {
      FinishLocked(Error(grpc::StatusCode::INVALID_ARGUMENT,
                         absl::StrCat("result partition ", partition_id_, " has no subpartition ", subpartition_,
                                      " (it has ", partition->num_subpartitions(), ")")));
      return true;
    }
    std::weak_ptr<Stream> weak = shared_from_this();
    absl::Status attached = partition->AttachConsumer(subpartition_, [weak] {
      if (std::shared_ptr<Stream> stream = weak.lock()) stream->Wake();
    });
    if (!attached.ok()) {
      FinishLocked(rpc::ToGrpcStatus(attached));
      return true;
    }
    partition_ = std::move(partition);
    phase_ = Phase::kServing;
    logging::Get("network")->debug("serving subpartition {} of result partition {} to {}", subpartition_,
                                   partition_id_, peer_);
    PumpLocked();
    return true;
  }

  void StopWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (registration_listener_.has_value()) {
      service_->partitions_->RemoveRegistrationListener(*registration_listener_);
      registration_listener_.reset();
    }
    CancelTimersLocked();
    if (counted_waiting_) {
      counted_waiting_ = false;
      absl::MutexLock lock(&service_->mu_);
      --service_->waiting_;
    }
  }

  // Sends the subpartition's next buffer when there is credit and no write
  // in flight; ends the stream when the partition was released.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ != Phase::kServing || writing_) return;
    if (credit_ > 0) {
      std::optional<Buffer> buffer = partition_->Poll(subpartition_);
      if (buffer.has_value()) {
        sending_end_ = buffer->kind == Buffer::Kind::kEndOfInput;
        --credit_;
        outgoing_ = ToProto(std::move(*buffer));
        writing_ = true;
        BeginLocked();
        stream_.Write(outgoing_, &write_done_);
        return;
      }
    }
    if (partition_->released()) {
      FinishLocked(Error(grpc::StatusCode::ABORTED,
                         absl::StrCat("result partition ", partition_->id(),
                                      " ", kReleasedBeforeEndOfInput,
                                      " (its producer was cancelled or failed)")));
    }
  }

  void OnWrittenLocked(bool ok) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    outgoing_.Clear();
    if (pending_finish_.has_value()) {
      grpc::Status status = *std::move(pending_finish_);
      pending_finish_.reset();
      SendFinishLocked(std::move(status));
      return;
    }
    if (phase_ == Phase::kFinishing) return;
    if (!ok) {
      FinishLocked(Error(grpc::StatusCode::CANCELLED, "the consumer went away"));
      return;
    }
    if (sending_end_) {
      phase_ = Phase::kDraining;
      DetachLocked();
      if (shutdown_) {
        FinishLocked(grpc::Status::OK);
      } else {
        grace_timer_set_ = true;
        SetTimerLocked(grace_timer_, grace_timer_done_, service_->options_.close_grace);
      }
      return;
    }
    PumpLocked();
  }

  void OnWakeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ == Phase::kFinishing) return;
    if (shutdown_) {
      FinishLocked(phase_ == Phase::kDraining ? grpc::Status::OK
                                              : Error(grpc::StatusCode::UNAVAILABLE, "the TaskManager is shutting down"));
      return;
    }
    if (phase_ == Phase::kWaiting) {
      ResolveLocked();
      return;
    }
    PumpLocked();
  }

  void DetachLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (partition_ != nullptr) {
      partition_->DetachConsumer(subpartition_);
      partition_.reset();
    }
  }

  // Ends the call with `status` (once), after a write in flight.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (phase_ == Phase::kFinishing) return;
    const bool draining = phase_ == Phase::kDraining;
    phase_ = Phase::kFinishing;
    StopWaitingLocked();
    DetachLocked();
    CancelTimersLocked();
    if (!status.ok() && !draining) {
      // NOT_FOUND is routine while producers deploy, and a consumer that went
      // away was cancelled or failed on its own side.
      const bool routine = status.error_code() == grpc::StatusCode::NOT_FOUND ||
                           status.error_code() == grpc::StatusCode::CANCELLED ||
                           status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
      logging::Get("network")->log(routine ? spdlog::level::debug : spdlog::level::info,
                                   "stopped serving subpartition {} of result partition {} to {}: {}", subpartition_,
                                   partition_id_.empty() ? "(none)" : partition_id_, peer_, status.error_message());
    }
    if (writing_) {
      pending_finish_ = std::move(status);
      return;
    }
    SendFinishLocked(std::move(status));
  }

  void SendFinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BeginLocked();
    stream_.Finish(status, &finish_done_);
  }

  // A read still in flight ends too: once the status is out, gRPC closes
  // the stream's read side (a server that ends a call resets the rest).
  void OnFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (registered_) {
      registered_ = false;
      absl::MutexLock lock(&service_->mu_);
      service_->active_.erase(this);
    }
  }

  DataExchangeServiceImpl* const service_;
  grpc::ServerCompletionQueue* const queue_;
  Completion accept_done_{this, Op::kAccept};
  Completion read_done_{this, Op::kRead};
  Completion write_done_{this, Op::kWrite};
  Completion wake_done_{this, Op::kWake};
  Completion partition_timer_done_{this, Op::kPartitionTimer};
  Completion grace_timer_done_{this, Op::kGraceTimer};
  Completion finish_done_{this, Op::kFinish};

  absl::Mutex mu_;
  grpc::ServerContext context_;
  grpc::ServerAsyncReaderWriter<v1::DataBuffer, v1::SubscribeRequest> stream_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Stream> self_ ABSL_GUARDED_BY(mu_);
  int ops_ ABSL_GUARDED_BY(mu_) = 0;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kOffered;
  std::string peer_ ABSL_GUARDED_BY(mu_);
  std::string partition_id_ ABSL_GUARDED_BY(mu_);
  int subpartition_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<ResultPartition> partition_ ABSL_GUARDED_BY(mu_);
  std::optional<PartitionManager::ListenerId> registration_listener_ ABSL_GUARDED_BY(mu_);
  v1::SubscribeRequest incoming_ ABSL_GUARDED_BY(mu_);
  v1::DataBuffer outgoing_ ABSL_GUARDED_BY(mu_);
  grpc::Alarm wake_ ABSL_GUARDED_BY(mu_);
  grpc::Alarm partition_timer_ ABSL_GUARDED_BY(mu_);
  grpc::Alarm grace_timer_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> pending_finish_ ABSL_GUARDED_BY(mu_);
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool sending_end_ ABSL_GUARDED_BY(mu_) = false;
  bool wake_armed_ ABSL_GUARDED_BY(mu_) = false;
  bool partition_timer_set_ ABSL_GUARDED_BY(mu_) = false;
  bool grace_timer_set_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  bool counted_waiting_ ABSL_GUARDED_BY(mu_) = false;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
};

DataExchangeServiceImpl::DataExchangeServiceImpl(PartitionManager* partitions, DataExchangeServiceOptions options)
    : partitions_(partitions), options_(options) {}

DataExchangeServiceImpl::~DataExchangeServiceImpl() {
  Shutdown();
  Stop();
}

void DataExchangeServiceImpl::Start(std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> queues) {
  std::vector<grpc::ServerCompletionQueue*> raw;
  std::vector<std::unique_ptr<grpc::CompletionQueue>> owned;
  for (auto& queue : queues) {
    raw.push_back(queue.get());
    owned.push_back(std::move(queue));
  }
  {
    absl::MutexLock lock(&mu_);
    WEIR_CHECK(!started_, "DataExchangeServiceImpl::Start called twice");
    started_ = true;
    threads_ = std::make_unique<NetworkThreads>("weir-net-srv", std::move(owned));
  }
  // A few calls offered per queue, so that a burst of subscriptions does not
  // wait for each accept to be re-offered.
  constexpr int kOffersPerQueue = 4;
  for (grpc::ServerCompletionQueue* queue : raw) {
    for (int i = 0; i < kOffersPerQueue; ++i) Accept(queue);
  }
}

void DataExchangeServiceImpl::Accept(grpc::ServerCompletionQueue* queue) {
  {
    absl::MutexLock lock(&mu_);
    // After Shutdown the server may be shutting down; its queues must not
    // get new work once they are shut down.
    if (shutting_down_) return;
    ++live_;
  }
  auto stream = std::make_shared<Stream>(this, queue);
  stream->Offer();
}

void DataExchangeServiceImpl::Shutdown() {
  std::vector<std::shared_ptr<Stream>> streams;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (Stream* stream : active_) {
      // Alive: a stream leaves active_ under mu_ before its last reference goes.
      if (std::shared_ptr<Stream> alive = stream->weak_from_this().lock()) streams.push_back(std::move(alive));
    }
  }
  for (const auto& stream : streams) stream->ShutDown();
}

void DataExchangeServiceImpl::Stop() {
  std::unique_ptr<NetworkThreads> threads;
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    if (!started_) return;
    // The server's Shutdown has ended every call and failed every offer.
    auto ended = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; };
    mu_.Await(absl::Condition(&ended));
    threads = std::move(threads_);
  }
  threads->Stop();
}

int DataExchangeServiceImpl::active_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(active_.size());
}

int DataExchangeServiceImpl::waiting_streams() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

int DataExchangeServiceImpl::network_threads() const {
  absl::MutexLock lock(&mu_);
  return threads_ == nullptr ? 0 : threads_->size();
}

}  // namespace weir::taskmanager::network
