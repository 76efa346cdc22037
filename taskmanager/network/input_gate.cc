#include "taskmanager/network/input_gate.h"

#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"
#include "common/rpc/rpc.h"
#include "common/status_macros.h"
#include "taskmanager/network/data_exchange_service.h"
#include "grpcpp/alarm.h"
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

  // Remote: received buffers not yet taken (guarded by the gate's mu_), and
  // the stream.
  std::deque<Buffer> queue;
  std::unique_ptr<RemoteChannel> remote;
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
    case absl::StatusCode::kResourceExhausted:
      return code;
    case absl::StatusCode::kAborted:
      // The producer's partition was released (IsReleasedBeforeEndOfInput)
      // or another abort the producer decided: kept, so the task can tell.
      return code;
    default:
      return absl::StatusCode::kUnavailable;
  }
}

}  // namespace

// The Subscribe stream of one remote channel, as a state machine driven by
// completions on one network client thread. One read is always in flight
// while the stream is open (what arrives goes to the channel's queue), at
// most one write (the subscription, then batched credit, then the
// half-close). A subscription answered NOT_FOUND or RESOURCE_EXHAUSTED
// before anything arrived is retried with backoff until the partition
// deadline; any other end before END_OF_INPUT fails the gate.
//
// Thread-safety: completions on a network thread; ReturnCredit on the task
// thread; Cancel from Close. All under mu_, which is taken before the gate's
// mu_ when both are needed.
class InputGate::RemoteChannel {
 public:
  RemoteChannel(InputGate* gate, Channel* channel, v1::DataExchangeService::Stub* stub, grpc::CompletionQueue* queue)
      : gate_(gate), channel_(channel), stub_(stub), queue_(queue),
        // Every consumer of a producer still being deployed subscribes
        // again; jitter spreads them out.
        backoff_({.initial = gate->options_.initial_backoff,
                  .multiplier = 2,
                  .max = gate->options_.max_backoff,
                  .jitter = 0.5}) {}

  // Opens the first subscription.
  void Start() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    SubscribeLocked();
  }

  // The task consumed one buffer of this channel.
  void ReturnCredit() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (done_ || ended_ || finishing_ || stream_ == nullptr) return;
    ++pending_credit_;
    WriteLocked();
  }

  // Ends the current call or the backoff; the last completion then settles
  // the channel.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (context_ != nullptr) context_->TryCancel();
    if (retrying_) retry_.Cancel();
  }

  enum class Op { kStart, kRead, kWrite, kWritesDone, kFinish, kRetry };
  void OnCompletion(Op op, bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    bool settled;
    {
      absl::MutexLock lock(&mu_);
      --ops_;
      switch (op) {
        case Op::kStart:
          if (ok) {
            // The subscription first, then the first read.
            pending_subscribe_ = true;
            WriteLocked();
            ReadLocked();
          } else {
            read_closed_ = true;  // the call never started; only its status is left
          }
          break;
        case Op::kRead:
          reading_ = false;
          if (ok) {
            OnMessageLocked();
          } else {
            read_closed_ = true;
          }
          break;
        case Op::kWrite:
          writing_ = false;
          if (ok) WriteLocked();
          break;
        case Op::kWritesDone:
          writing_ = false;
          break;
        case Op::kFinish:
          OnFinishedLocked();
          break;
        case Op::kRetry:
          retrying_ = false;
          if (ok && !cancelled_ && !GateClosing()) {
            SubscribeLocked();
          } else {
            done_ = true;
          }
          break;
      }
      FinishIfDueLocked();
      settled = done_ && ops_ == 0;
    }
    // After this the gate (and this channel) may be destroyed.
    if (settled) gate_->RemoteChannelSettled();
  }

 private:
  using Completion = OpCompletion<RemoteChannel, Op>;

  bool GateClosing() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::MutexLock lock(&gate_->mu_);
    return gate_->closing_;
  }

  void SubscribeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cancelled_) {
      done_ = true;
      return;
    }
    context_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->PrepareAsyncSubscribe(context_.get(), queue_);
    received_ = false;
    read_closed_ = false;
    finishing_ = false;
    ended_ = false;
    writes_closed_ = false;
    pending_credit_ = 0;
    failure_ = absl::OkStatus();
    ++ops_;
    stream_->StartCall(&start_done_);
  }

  void ReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reading_ = true;
    ++ops_;
    stream_->Read(&incoming_, &read_done_);
  }

  // Sends what is due when no write is in flight: the subscription, credit,
  // or (after END_OF_INPUT) the half-close.
  void WriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || read_closed_ || writes_closed_ || stream_ == nullptr) return;
    if (pending_subscribe_) {
      pending_subscribe_ = false;
      outgoing_.Clear();
      v1::Subscription* subscription = outgoing_.mutable_subscribe();
      subscription->set_partition_id(channel_->spec.partition_id);
      subscription->set_subpartition(channel_->spec.subpartition);
      subscription->set_initial_credit(gate_->options_.initial_credit);
    } else if (ended_) {
      writes_closed_ = true;
      writing_ = true;
      ++ops_;
      stream_->WritesDone(&writes_done_);
      return;
    } else if (pending_credit_ > 0) {
      outgoing_.Clear();
      outgoing_.set_credit(pending_credit_);
      pending_credit_ = 0;
    } else {
      return;
    }
    writing_ = true;
    ++ops_;
    stream_->Write(outgoing_, &write_done_);
  }

  void OnMessageLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    received_ = true;
    if (ended_) {  // nothing may follow END_OF_INPUT; the producer is about to finish the call
      ReadLocked();
      return;
    }
    absl::StatusOr<Buffer> buffer = FromProto(std::move(incoming_));
    incoming_.Clear();
    if (!buffer.ok()) {
      FailStreamLocked(buffer.status());
      return;
    }
    const bool end = buffer->kind == Buffer::Kind::kEndOfInput;
    {
      absl::MutexLock lock(&gate_->mu_);
      if (static_cast<int>(channel_->queue.size()) >= gate_->options_.initial_credit) {
        failure_ = absl::FailedPreconditionError("the producer sent more buffers than it had credit for");
      } else {
        channel_->queue.push_back(*std::move(buffer));
      }
    }
    if (!failure_.ok()) {
      FailStreamLocked(failure_);
      return;
    }
    gate_->signal_->Notify();
    if (end) {
      ended_ = true;
      WriteLocked();  // the half-close, unless a write is in flight (then after it)
    }
    ReadLocked();
  }

  // Ends the call from this side (no further read is started); Finish
  // follows once nothing is in flight.
  void FailStreamLocked(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    failure_ = std::move(status);
    read_closed_ = true;
    context_->TryCancel();
  }

  // Asks for the call's status once nothing else is in flight on it.
  void FinishIfDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stream_ == nullptr || finishing_ || !read_closed_ || reading_ || writing_) return;
    finishing_ = true;
    ++ops_;
    stream_->Finish(&status_, &finish_done_);
  }

  void OnFinishedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto log = logging::Get("network");
    stream_.reset();
    context_.reset();
    const grpc::Status status = status_;
    if (ended_) {
      if (!status.ok()) {
        log->debug("{}: {} ended with {} after end of input", gate_->name_, channel_->description,
                   status.error_message());
      }
      done_ = true;
      return;
    }
    if (cancelled_ || GateClosing()) {
      done_ = true;
      return;
    }
    absl::Status failure = failure_;
    if (failure.ok()) {
      failure = status.ok() ? absl::UnavailableError("the producer ended the stream without END_OF_INPUT")
                            : rpc::FromGrpcStatus(status);
    }
    const bool retriable = failure.code() == absl::StatusCode::kNotFound ||
                           failure.code() == absl::StatusCode::kResourceExhausted;
    const absl::Duration wait = backoff_.Next();
    if (!received_ && retriable && absl::Now() + wait < gate_->partition_deadline_) {
      log->debug("{}: {} is not served yet ({}); subscribing again in {}", gate_->name_, channel_->description,
                 failure.message(), absl::FormatDuration(wait));
      retrying_ = true;
      ++ops_;
      retry_.Set(queue_, absl::ToChronoTime(absl::Now() + wait), &retry_done_);
      return;
    }
    std::string why;
    if (failure.code() == absl::StatusCode::kNotFound) {
      why = absl::StrCat("the partition was not registered within ",
                         absl::FormatDuration(gate_->options_.partition_timeout), ": ");
    } else if (failure.code() == absl::StatusCode::kResourceExhausted) {
      why = absl::StrCat("the producer's TaskManager refused the subscription until the partition deadline (",
                         absl::FormatDuration(gate_->options_.partition_timeout), "): ");
    } else if (failure.code() == absl::StatusCode::kCancelled) {
      why = "the producer ended the stream (its task was cancelled or failed, or its TaskManager is shutting down): ";
    }
    gate_->Fail(absl::Status(ChannelFailureCode(failure.code()),
                             absl::StrCat(gate_->name_, ": input channel ", channel_->index, " (",
                                          channel_->description, ") failed before end of input: ", why,
                                          absl::StatusCodeToString(failure.code()), ": ", failure.message())));
    done_ = true;
  }

  InputGate* const gate_;
  Channel* const channel_;
  v1::DataExchangeService::Stub* const stub_;
  grpc::CompletionQueue* const queue_;
  Completion start_done_{this, Op::kStart};
  Completion read_done_{this, Op::kRead};
  Completion write_done_{this, Op::kWrite};
  Completion writes_done_{this, Op::kWritesDone};
  Completion finish_done_{this, Op::kFinish};
  Completion retry_done_{this, Op::kRetry};

  absl::Mutex mu_;
  // The current call (null between calls).
  std::unique_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::SubscribeRequest, v1::DataBuffer>> stream_ ABSL_GUARDED_BY(mu_);
  // Targets of the read and write in flight, and of Finish.
  v1::DataBuffer incoming_ ABSL_GUARDED_BY(mu_);
  v1::SubscribeRequest outgoing_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  grpc::Alarm retry_ ABSL_GUARDED_BY(mu_);
  // Operations in flight (each will run OnCompletion once).
  int ops_ ABSL_GUARDED_BY(mu_) = 0;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool read_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool pending_subscribe_ ABSL_GUARDED_BY(mu_) = false;
  int pending_credit_ ABSL_GUARDED_BY(mu_) = 0;
  // END_OF_INPUT arrived on the current call.
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  // Anything arrived on the current call.
  bool received_ ABSL_GUARDED_BY(mu_) = false;
  bool retrying_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // No operation will be started any more.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Why this side ended the call (bad message), if it did.
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  retry::Backoff backoff_ ABSL_GUARDED_BY(mu_);
};


InputGate::InputGate(std::string name, PartitionManager* local_partitions, InputGateOptions options)
    : name_(std::move(name)),
      local_partitions_(local_partitions),
      options_(options),
      partition_deadline_(absl::Now() + options.partition_timeout),
      signal_(options_.wakeup != nullptr ? options_.wakeup : std::make_shared<Wakeup>()),
      network_(options_.network) {}

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
      if (gate->network_ == nullptr) gate->network_ = NetworkClient::Create(1);
      channel->remote = std::make_unique<RemoteChannel>(gate.get(), channel.get(),
                                                        gate->network_->StubFor(spec.producer_address),
                                                        gate->network_->NextQueue());
      ++remote;
    }
    gate->channels_.push_back(std::move(channel));
  }
  gate->unfinished_ = static_cast<int>(gate->channels_.size());
  {
    absl::MutexLock lock(&gate->mu_);
    gate->unsettled_remote_ = remote;
  }
  for (const auto& channel : gate->channels_) {
    if (channel->remote != nullptr) channel->remote->Start();
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
                                             "): the partition ", kReleasedBeforeEndOfInput,
                                             " (its producer was cancelled or failed)"));
    }
    return std::optional<Buffer>();
  }
  absl::MutexLock lock(&mu_);
  if (channel.queue.empty()) return std::optional<Buffer>();
  Buffer buffer = std::move(channel.queue.front());
  channel.queue.pop_front();
  return std::optional<Buffer>(std::move(buffer));
}

void InputGate::ReturnCredit(Channel& channel) { channel.remote->ReturnCredit(); }

void InputGate::Fail(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok() || closing_) return;
    error_ = status;
  }
  logging::Get("network")->warn("{}", status);
  signal_->Notify();
}

void InputGate::RemoteChannelSettled() {
  absl::MutexLock lock(&mu_);
  --unsettled_remote_;
}

void InputGate::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
  }
  signal_->Notify();
  for (const auto& channel : channels_) {
    if (channel->remote != nullptr) channel->remote->Cancel();
  }
  {
    absl::MutexLock lock(&mu_);
    auto settled = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return unsettled_remote_ == 0; };
    mu_.Await(absl::Condition(&settled));
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
