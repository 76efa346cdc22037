#include "taskmanager/network/input_gate.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging/logging.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "taskmanager/network/data_exchange_service.h"
#include "weir/v1/data.grpc.pb.h"

namespace weir::taskmanager::network {

struct InputGate::Channel {
  int index = 0;
  InputChannelSpec spec;
  // "subpartition 1 of result partition p from producer host:port"
  std::string description;

  // Task thread only.
  bool finished = false;
  // Held back for checkpoint alignment: Next skips it.
  bool blocked = false;
  // Local: the producer's partition once registered (and attached to).
  std::shared_ptr<ResultPartition> partition;
  std::optional<PartitionManager::ListenerId> registration_listener;

  // Remote.
  std::unique_ptr<v1::DataExchangeService::Stub> stub;
  std::thread reader;
  // Guarded by the gate's mu_: received buffers not yet taken, and the
  // context of the current call (so that Close can cancel it).
  std::deque<Buffer> queue;
  std::unique_ptr<grpc::ClientContext> context;
  // The write side of the current call: the task thread returns credit, the
  // reader thread subscribes, half-closes and finishes (and owns the stream).
  absl::Mutex write_mu;
  grpc::ClientReaderWriter<v1::SubscribeRequest, v1::DataBuffer>* stream ABSL_GUARDED_BY(write_mu) = nullptr;
  bool writes_closed ABSL_GUARDED_BY(write_mu) = true;
};

namespace {

// Keeps the codes that mean "fix something" and reports the rest (the
// producer or the connection went away) as UNAVAILABLE.
absl::StatusCode ChannelFailureCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnimplemented:
      return code;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

}  // namespace

InputGate::InputGate(std::string name, PartitionManager* local_partitions, InputGateOptions options)
    : name_(std::move(name)),
      local_partitions_(local_partitions),
      options_(options),
      partition_deadline_(absl::Now() + options.partition_timeout),
      signal_(options_.wakeup != nullptr ? options_.wakeup : std::make_shared<Wakeup>()) {}

absl::StatusOr<std::unique_ptr<InputGate>> InputGate::Create(std::string name, std::vector<InputChannelSpec> channels,
                                                            PartitionManager* local_partitions,
                                                            InputGateOptions options) {
  if (options.initial_credit < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": input gate initial credit must be >= 1, got ", options.initial_credit));
  }
  for (size_t i = 0; i < channels.size(); ++i) {
    const InputChannelSpec& spec = channels[i];
    std::string context = absl::StrCat(name, ": input channel ", i);
    if (spec.partition_id.empty()) return absl::InvalidArgumentError(absl::StrCat(context, " has no partition id"));
    if (spec.subpartition < 0) {
      return absl::InvalidArgumentError(absl::StrCat(context, " has negative subpartition ", spec.subpartition));
    }
    if (spec.local && local_partitions == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(context, " is local but the gate has no partition manager"));
    }
    if (!spec.local && spec.producer_address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(context, " is remote but has no producer address"));
    }
  }

  std::unique_ptr<InputGate> gate(new InputGate(std::move(name), local_partitions, options));
  absl::flat_hash_map<std::string, std::shared_ptr<grpc::Channel>> connections;
  int remote = 0;
  for (size_t i = 0; i < channels.size(); ++i) {
    auto channel = std::make_unique<Channel>();
    channel->index = static_cast<int>(i);
    channel->spec = std::move(channels[i]);
    const InputChannelSpec& spec = channel->spec;
    channel->description =
        absl::StrCat("subpartition ", spec.subpartition, " of result partition ", spec.partition_id, " from ",
                     spec.local ? "this TaskManager" : absl::StrCat("producer ", spec.producer_address));
    if (spec.local) {
      channel->registration_listener = local_partitions->AddRegistrationListener(
          spec.partition_id, [signal = gate->signal_] { signal->Notify(); });
    } else {
      std::shared_ptr<grpc::Channel>& connection = connections[spec.producer_address];
      if (connection == nullptr) connection = rpc::CreateChannel(spec.producer_address);
      channel->stub = v1::DataExchangeService::NewStub(connection);
      ++remote;
    }
    gate->channels_.push_back(std::move(channel));
  }
  gate->unfinished_ = static_cast<int>(gate->channels_.size());
  for (const auto& channel : gate->channels_) {
    if (!channel->spec.local) {
      Channel* raw = channel.get();
      channel->reader = std::thread([gate = gate.get(), raw] { gate->RunRemoteChannel(raw); });
    }
  }
  logging::Get("network")->debug("input gate of {}: {} channels ({} remote)", gate->name_, gate->channels_.size(),
                                 remote);
  return gate;
}

InputGate::~InputGate() { Close(); }

const InputChannelSpec& InputGate::channel_spec(int channel) const {
  WEIR_CHECK(channel >= 0 && channel < num_channels(), absl::StrCat(name_, ": no input channel ", channel));
  return channels_[channel]->spec;
}

int InputGate::queued_buffers(int channel) const {
  WEIR_CHECK(channel >= 0 && channel < num_channels(), absl::StrCat(name_, ": no input channel ", channel));
  const Channel& c = *channels_[channel];
  if (c.spec.local) return c.partition == nullptr ? 0 : c.partition->buffered(c.spec.subpartition);
  absl::MutexLock lock(&mu_);
  return static_cast<int>(c.queue.size());
}

absl::StatusOr<std::optional<std::pair<int, Buffer>>> InputGate::Next(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const int n = num_channels();
  for (;;) {
    const uint64_t seen = signal_->generation();
    {
      absl::MutexLock lock(&mu_);
      if (!error_.ok()) return error_;
      if (closing_) return absl::FailedPreconditionError(absl::StrCat(name_, ": the input gate is closed"));
    }
    if (unfinished_ == 0) return std::nullopt;

    const absl::Time now = absl::Now();
    absl::Time wake = deadline;
    for (int k = 0; k < n; ++k) {
      const int i = (next_channel_ + k) % n;
      Channel& channel = *channels_[i];
      if (channel.finished || channel.blocked) continue;
      if (channel.spec.local && channel.partition == nullptr) {
        absl::Status resolved = ResolveLocal(channel, now);
        if (!resolved.ok()) {
          Fail(resolved);
          return resolved;
        }
        if (channel.partition == nullptr) {
          wake = std::min(wake, partition_deadline_);
          continue;
        }
      }
      absl::StatusOr<std::optional<Buffer>> taken = Take(channel);
      if (!taken.ok()) {
        Fail(taken.status());
        return taken.status();
      }
      if (!taken->has_value()) continue;

      Buffer buffer = std::move(**taken);
      next_channel_ = (i + 1) % n;
      if (buffer.kind == Buffer::Kind::kEndOfInput) {
        channel.finished = true;
        --unfinished_;
        if (channel.spec.local) channel.partition->DetachConsumer(channel.spec.subpartition);
      } else if (!channel.spec.local) {
        ReturnCredit(channel);
      }
      return std::make_optional(std::make_pair(i, std::move(buffer)));
    }
    if (absl::Now() >= deadline) return std::nullopt;
    signal_->WaitForChange(seen, wake);
  }
}

void InputGate::BlockChannel(int channel) { channels_.at(channel)->blocked = true; }

void InputGate::UnblockAllChannels() {
  for (auto& channel : channels_) channel->blocked = false;
}

bool InputGate::channel_blocked(int channel) const { return channels_.at(channel)->blocked; }

bool InputGate::channel_finished(int channel) const { return channels_.at(channel)->finished; }

absl::Status InputGate::ResolveLocal(Channel& channel, absl::Time now) {
  std::shared_ptr<ResultPartition> partition = local_partitions_->Lookup(channel.spec.partition_id);
  if (partition == nullptr) {
    if (now < partition_deadline_) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat(name_, ": input channel ", channel.index, " (", channel.description,
                                            "): the partition was not registered within ",
                                            absl::FormatDuration(options_.partition_timeout)));
  }
  if (channel.registration_listener.has_value()) {
    local_partitions_->RemoveRegistrationListener(*channel.registration_listener);
    channel.registration_listener.reset();
  }
  if (channel.spec.subpartition >= partition->num_subpartitions()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": input channel ", channel.index, " (",
                                                   channel.description, "): the partition has only ",
                                                   partition->num_subpartitions(), " subpartitions"));
  }
  RETURN_IF_ERROR(partition->AttachConsumer(channel.spec.subpartition, [signal = signal_] { signal->Notify(); }));
  channel.partition = std::move(partition);
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Buffer>> InputGate::Take(Channel& channel) {
  if (channel.spec.local) {
    std::optional<Buffer> buffer = channel.partition->Poll(channel.spec.subpartition);
    if (buffer.has_value()) return buffer;
    if (channel.partition->released()) {
      return absl::AbortedError(absl::StrCat(name_, ": input channel ", channel.index, " (", channel.description,
                                             "): the partition was released before end of input (its producer "
                                             "was cancelled or failed)"));
    }
    return std::optional<Buffer>();
  }
  absl::MutexLock lock(&mu_);
  if (channel.queue.empty()) return std::optional<Buffer>();
  Buffer buffer = std::move(channel.queue.front());
  channel.queue.pop_front();
  return std::optional<Buffer>(std::move(buffer));
}

void InputGate::ReturnCredit(Channel& channel) {
  absl::MutexLock lock(&channel.write_mu);
  if (channel.stream == nullptr || channel.writes_closed) return;
  v1::SubscribeRequest request;
  request.set_credit(1);
  // A failed write means the call is over; the reader thread reports why.
  channel.stream->Write(request);
}

void InputGate::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok() || closing_) return;
    error_ = status;
  }
  logging::Get("network")->warn("{}", status);
  signal_->Notify();
}

void InputGate::RunRemoteChannel(Channel* channel) {
  auto log = logging::Get("network");
  const InputChannelSpec& spec = channel->spec;
  absl::Duration backoff = options_.initial_backoff;
  for (;;) {
    grpc::ClientContext* context;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) return;
      channel->context = std::make_unique<grpc::ClientContext>();
      context = channel->context.get();
    }
    std::unique_ptr<grpc::ClientReaderWriter<v1::SubscribeRequest, v1::DataBuffer>> stream =
        channel->stub->Subscribe(context);
    {
      absl::MutexLock lock(&channel->write_mu);
      channel->stream = stream.get();
      channel->writes_closed = false;
      v1::SubscribeRequest request;
      v1::Subscription* subscription = request.mutable_subscribe();
      subscription->set_partition_id(spec.partition_id);
      subscription->set_subpartition(spec.subpartition);
      subscription->set_initial_credit(options_.initial_credit);
      // A failed write shows up in Read and Finish below.
      stream->Write(request);
    }

    bool received = false;
    bool ended = false;
    absl::Status failure;
    v1::DataBuffer message;
    while (stream->Read(&message)) {
      received = true;
      if (ended) continue;  // Nothing may follow END_OF_INPUT; the producer is about to finish the call.
      absl::StatusOr<Buffer> buffer = FromProto(std::move(message));
      message.Clear();
      if (!buffer.ok()) {
        failure = buffer.status();
        break;
      }
      ended = buffer->kind == Buffer::Kind::kEndOfInput;
      {
        absl::MutexLock lock(&mu_);
        if (static_cast<int>(channel->queue.size()) >= options_.initial_credit) {
          failure = absl::FailedPreconditionError("the producer sent more buffers than it had credit for");
          break;
        }
        channel->queue.push_back(*std::move(buffer));
      }
      signal_->Notify();
      if (ended) {
        absl::MutexLock lock(&channel->write_mu);
        stream->WritesDone();
        channel->writes_closed = true;
      }
    }
    if (!failure.ok()) context->TryCancel();
    grpc::Status status;
    {
      // After Read returned false (or the cancel) the status is there: this
      // does not block for long.
      absl::MutexLock lock(&channel->write_mu);
      channel->writes_closed = true;
      status = stream->Finish();
      channel->stream = nullptr;
    }
    stream.reset();
    bool closing;
    {
      absl::MutexLock lock(&mu_);
      channel->context.reset();
      closing = closing_;
    }
    if (ended) {
      if (!status.ok()) log->debug("{}: {} ended with {} after end of input", name_, channel->description,
                                   status.error_message());
      return;
    }
    if (closing) return;
    if (failure.ok()) {
      failure = status.ok() ? absl::UnavailableError("the producer ended the stream without END_OF_INPUT")
                            : rpc::FromGrpcStatus(status);
    }
    if (!received && failure.code() == absl::StatusCode::kNotFound && absl::Now() + backoff < partition_deadline_) {
      log->debug("{}: {} is not registered yet; subscribing again in {}", name_, channel->description,
                 absl::FormatDuration(backoff));
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&closing_), backoff)) return;
      backoff = std::min(backoff * 2, options_.max_backoff);
      continue;
    }
    std::string why;
    if (failure.code() == absl::StatusCode::kNotFound) {
      why = absl::StrCat("the partition was not registered within ", absl::FormatDuration(options_.partition_timeout),
                         ": ");
    } else if (failure.code() == absl::StatusCode::kCancelled) {
      why = "the producer ended the stream (its task was cancelled or failed, or its TaskManager is shutting down): ";
    }
    Fail(absl::Status(ChannelFailureCode(failure.code()),
                      absl::StrCat(name_, ": input channel ", channel->index, " (", channel->description,
                                   ") failed before end of input: ", why, absl::StatusCodeToString(failure.code()),
                                   ": ", failure.message())));
    return;
  }
}

void InputGate::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    for (const auto& channel : channels_) {
      if (channel->context != nullptr) channel->context->TryCancel();
    }
  }
  signal_->Notify();
  for (const auto& channel : channels_) {
    if (channel->reader.joinable()) channel->reader.join();
  }
  for (const auto& channel : channels_) {
    if (channel->registration_listener.has_value()) {
      local_partitions_->RemoveRegistrationListener(*channel->registration_listener);
      channel->registration_listener.reset();
    }
    if (channel->partition != nullptr && !channel->finished) {
      channel->partition->DetachConsumer(channel->spec.subpartition);
    }
  }
  logging::Get("network")->debug("input gate of {} closed", name_);
}

}  // namespace weir::taskmanager::network
