#include "taskmanager/network/data_exchange_service.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/rpc/auth.h"
#include "common/rpc/rpc.h"

namespace weir::taskmanager::network {
namespace {

// While waiting for a partition nothing tells a sync handler that its client
// went away, so the wait looks at the call's cancellation this often.
constexpr absl::Duration kCancellationCheckInterval = absl::Milliseconds(100);

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
  }
  return message;
}

absl::StatusOr<Buffer> FromProto(v1::DataBuffer message) {
  switch (message.kind()) {
    case v1::BUFFER_KIND_DATA:
      if (message.record_count() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("data buffer with a negative record count ", message.record_count()));
      }
      return Buffer{Buffer::Kind::kData, std::move(*message.mutable_data()), message.record_count()};
    case v1::BUFFER_KIND_END_OF_INPUT:
      return Buffer::EndOfInput();
    case v1::BUFFER_KIND_CHECKPOINT_BARRIER:
      if (message.checkpoint_id() <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint barrier with id ", message.checkpoint_id()));
      }
      return Buffer::Barrier(message.checkpoint_id(), message.checkpoint_timestamp_unix_ms());
    default:
      return absl::InvalidArgumentError(absl::StrCat("buffer of unknown kind ", static_cast<int>(message.kind())));
  }
}

// What the handler thread of one stream waits on. Everything that can change
// its mind (credit, data available, consumer gone, partition registered or
// released, shutdown) bumps `events`.
struct DataExchangeServiceImpl::StreamState {
  absl::Mutex mu;
  uint64_t events ABSL_GUARDED_BY(mu) = 0;
  int64_t credit ABSL_GUARDED_BY(mu) = 0;
  bool consumer_closed ABSL_GUARDED_BY(mu) = false;
  bool shutdown ABSL_GUARDED_BY(mu) = false;
  absl::Status protocol_error ABSL_GUARDED_BY(mu);

  void Notify() {
    absl::MutexLock lock(&mu);
    ++events;
  }
};

DataExchangeServiceImpl::DataExchangeServiceImpl(PartitionManager* partitions, DataExchangeServiceOptions options)
    : partitions_(partitions), options_(options) {}

DataExchangeServiceImpl::~DataExchangeServiceImpl() { Shutdown(); }

void DataExchangeServiceImpl::Shutdown() {
  std::vector<std::shared_ptr<StreamState>> streams;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    streams.assign(streams_.begin(), streams_.end());
  }
  for (const auto& state : streams) {
    absl::MutexLock lock(&state->mu);
    state->shutdown = true;
    ++state->events;
  }
}

int DataExchangeServiceImpl::active_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

grpc::Status DataExchangeServiceImpl::Subscribe(
    grpc::ServerContext* context, grpc::ServerReaderWriter<v1::DataBuffer, v1::SubscribeRequest>* stream) {
  WEIR_RPC_AUTHORIZE(context);
  const std::string peer = context->peer();  // "unknown" once the call is cancelled
  v1::SubscribeRequest first;
  if (!stream->Read(&first)) {
    return Error(grpc::StatusCode::CANCELLED, "the consumer closed the stream before subscribing");
  }
  if (!first.has_subscribe()) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, "the first message of a Subscribe stream must subscribe");
  }
  const v1::Subscription subscription = first.subscribe();
  const std::string& partition_id = subscription.partition_id();
  const int subpartition = subscription.subpartition();
  if (partition_id.empty()) return Error(grpc::StatusCode::INVALID_ARGUMENT, "subscription without a partition id");
  if (subpartition < 0) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("negative subpartition ", subpartition));
  }
  if (subscription.initial_credit() < 1 || subscription.initial_credit() > options_.max_initial_credit) {
    return Error(grpc::StatusCode::INVALID_ARGUMENT,
                 absl::StrCat("initial credit ", subscription.initial_credit(), " is not in [1, ",
                              options_.max_initial_credit, "]"));
  }

  auto state = std::make_shared<StreamState>();
  {
    absl::MutexLock lock(&state->mu);
    state->credit = subscription.initial_credit();
  }
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return Error(grpc::StatusCode::UNAVAILABLE, "the TaskManager is shutting down");
    streams_.insert(state);
  }

  grpc::Status result;
  absl::StatusOr<std::shared_ptr<ResultPartition>> partition = AwaitPartition(context, partition_id, state);
  if (!partition.ok()) {
    result = rpc::ToGrpcStatus(partition.status());
  } else if (subpartition >= (*partition)->num_subpartitions()) {
    result = Error(grpc::StatusCode::INVALID_ARGUMENT,
                   absl::StrCat("result partition ", partition_id, " has no subpartition ", subpartition, " (it has ",
                                (*partition)->num_subpartitions(), ")"));
  } else {
    absl::Status attached = (*partition)->AttachConsumer(subpartition, [state] { state->Notify(); });
    if (!attached.ok()) {
      result = rpc::ToGrpcStatus(attached);
    } else {
      logging::Get("network")->debug("serving subpartition {} of result partition {} to {}", subpartition,
                                     partition_id, peer);
      result = Serve(context, stream, subscription, **partition, *state);
      (*partition)->DetachConsumer(subpartition);
    }
  }
  if (!result.ok()) {
    // NOT_FOUND is routine while producers deploy, and a consumer that went
    // away was cancelled or failed on its own side.
    const bool routine =
        result.error_code() == grpc::StatusCode::NOT_FOUND || result.error_code() == grpc::StatusCode::CANCELLED;
    logging::Get("network")->log(routine ? spdlog::level::debug : spdlog::level::info,
                                 "stopped serving subpartition {} of result partition {} to {}: {}", subpartition,
                                 partition_id, peer, result.error_message());
  }
  {
    absl::MutexLock lock(&mu_);
    streams_.erase(state);
  }
  return result;
}

absl::StatusOr<std::shared_ptr<ResultPartition>> DataExchangeServiceImpl::AwaitPartition(
    grpc::ServerContext* context, const std::string& partition_id, const std::shared_ptr<StreamState>& state) {
  const absl::Time deadline = absl::Now() + options_.partition_wait;
  const PartitionManager::ListenerId listener =
      partitions_->AddRegistrationListener(partition_id, [state] { state->Notify(); });
  absl::StatusOr<std::shared_ptr<ResultPartition>> result;
  for (;;) {
    uint64_t seen;
    {
      absl::MutexLock lock(&state->mu);
      if (state->shutdown) {
        result = absl::UnavailableError("the TaskManager is shutting down");
        break;
      }
      seen = state->events;
    }
    if (std::shared_ptr<ResultPartition> partition = partitions_->Lookup(partition_id)) {
      result = std::move(partition);
      break;
    }
    if (context->IsCancelled()) {
      result = absl::CancelledError("the consumer went away while waiting for the partition");
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      result = absl::NotFoundError(absl::StrCat("result partition ", partition_id,
                                                " is not registered on this TaskManager (waited ",
                                                absl::FormatDuration(options_.partition_wait), ")"));
      break;
    }
    absl::MutexLock lock(&state->mu);
    auto changed = [&state, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) { return state->events != seen; };
    state->mu.AwaitWithDeadline(absl::Condition(&changed), std::min(deadline, now + kCancellationCheckInterval));
  }
  partitions_->RemoveRegistrationListener(listener);
  return result;
}

grpc::Status DataExchangeServiceImpl::Serve(grpc::ServerContext* context,
                                            grpc::ServerReaderWriter<v1::DataBuffer, v1::SubscribeRequest>* stream,
                                            const v1::Subscription& subscription, ResultPartition& partition,
                                            StreamState& state) {
  const int subpartition = subscription.subpartition();
  // Reads credit until the consumer half-closes or the call ends. The
  // handler thread below is the only writer.
  std::thread credit_reader([stream, &state] {
    v1::SubscribeRequest request;
    while (stream->Read(&request)) {
      absl::MutexLock lock(&state.mu);
      ++state.events;
      if (request.has_credit() && request.credit() > 0) {
        state.credit += request.credit();
      } else if (state.protocol_error.ok()) {
        state.protocol_error =
            absl::InvalidArgumentError("after subscribing, a consumer may only send positive credit");
      }
    }
    absl::MutexLock lock(&state.mu);
    state.consumer_closed = true;
    ++state.events;
  });

  grpc::Status result;
  bool sent_end = false;
  for (;;) {
    uint64_t seen;
    bool have_credit;
    {
      absl::MutexLock lock(&state.mu);
      if (state.shutdown) {
        result = Error(grpc::StatusCode::UNAVAILABLE, "the TaskManager is shutting down");
        break;
      }
      if (!state.protocol_error.ok()) {
        result = rpc::ToGrpcStatus(state.protocol_error);
        break;
      }
      if (state.consumer_closed) {
        result = Error(grpc::StatusCode::CANCELLED, "the consumer closed the stream before end of input");
        break;
      }
      have_credit = state.credit > 0;
      seen = state.events;
    }
    if (have_credit) {
      std::optional<Buffer> buffer = partition.Poll(subpartition);
      if (buffer.has_value()) {
        const bool end = buffer->kind == Buffer::Kind::kEndOfInput;
        {
          absl::MutexLock lock(&state.mu);
          --state.credit;
        }
        if (!stream->Write(ToProto(std::move(*buffer)))) {
          result = Error(grpc::StatusCode::CANCELLED, "the consumer went away");
          break;
        }
        if (end) {
          sent_end = true;
          break;
        }
        continue;
      }
    }
    if (partition.released()) {
      result = Error(grpc::StatusCode::ABORTED,
                     absl::StrCat("result partition ", partition.id(),
                                  " was released before end of input (its producer was cancelled or failed)"));
      break;
    }
    absl::MutexLock lock(&state.mu);
    auto changed = [&state, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) { return state.events != seen; };
    state.mu.Await(absl::Condition(&changed));
  }

  bool consumer_closed;
  {
    absl::MutexLock lock(&state.mu);
    if (sent_end) {
      auto closed = [&state]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
        return state.consumer_closed || state.shutdown;
      };
      state.mu.AwaitWithTimeout(absl::Condition(&closed), options_.close_grace);
    }
    consumer_closed = state.consumer_closed;
  }
  // Until the consumer half-closes, the credit reader is blocked in Read;
  // cancelling the call is what ends that (the consumer then sees CANCELLED).
  if (!consumer_closed) context->TryCancel();
  credit_reader.join();
  return sent_end ? grpc::Status::OK : result;
}

}  // namespace weir::taskmanager::network
