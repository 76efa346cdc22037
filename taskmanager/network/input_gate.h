// InputGate: every input channel of one consumer task, one per (upstream
// edge, producer subtask), and the single place its task thread takes input
// buffers from.
//
// A local channel (producer in the same TaskManager) reads the producer's
// ResultPartition directly. A remote channel is a DataExchangeService
// Subscribe stream to the producer's TaskManager, driven asynchronously by
// the TaskManager's client network threads (NetworkClient: a fixed number of
// threads for all channels, one connection per producer TaskManager), which
// put what arrives into the channel's own queue. The gate grants the producer
// `initial_credit` buffers up front and returns one credit each time the task
// consumes a buffer of that channel (credits taken while a write is in flight
// go out together), so the queue never holds more than `initial_credit`
// buffers and a task that stops reading stops its producers.
//
// Channels keep their own queues (they are not merged) so that checkpoint
// alignment can hold back single channels (BlockChannel): a blocked channel
// is not read, so its producer runs out of credit and stops, while the other
// channels go on.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "taskmanager/mailbox/wakeup.h"
#include "taskmanager/network/buffer.h"
#include "taskmanager/network/network_client.h"
#include "taskmanager/network/result_partition.h"

namespace weir::taskmanager::network {

struct InputChannelSpec {
  // The producer's result partition and this consumer's subpartition of it.
  std::string partition_id;
  int subpartition = 0;
  // host:port of the producer TaskManager's DataExchangeService (remote
  // channels; for local ones only used in messages).
  std::string producer_address;
  // True when the producer runs in this TaskManager.
  bool local = false;
};

struct InputGateOptions {
  // Buffers a remote channel may have in flight or queued (default 4).
  int initial_credit = 4;
  // How long a producer's partition may take to be registered, e.g. because
  // the producer task is still being deployed (default 60 s). Remote
  // subscriptions answered NOT_FOUND are retried until then, waiting
  // initial_backoff doubling to max_backoff, each wait drawn from its upper
  // half.
  absl::Duration partition_timeout = absl::Seconds(60);
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(1);
  // Bumped whenever some channel may have become ready (a buffer arrived, a
  // partition was registered or released, a channel failed). A task shares
  // it with its mailbox so that one wait covers both; null: the gate's own.
  std::shared_ptr<Wakeup> wakeup;
  // The TaskManager's client side of the data exchange; null: a gate with
  // remote channels makes a private one with one thread (tests, tools).
  std::shared_ptr<NetworkClient> network;
};

// Thread-safety: Next, finished, queued_buffers and Close are for the owning
// task thread only. The remote channels' completions run on the network
// client's threads; Close (or the destructor) ends every remote stream and
// returns once none of those threads touches the gate any more.
class InputGate {
 public:
  // Validates the specs and starts subscribing the remote channels.
  // `local_partitions` (this TaskManager's registry) must outlive the gate;
  // it may be null when no channel is local. `name` identifies the task in
  // errors and logs.
  static absl::StatusOr<std::unique_ptr<InputGate>> Create(std::string name, std::vector<InputChannelSpec> channels,
                                                          PartitionManager* local_partitions,
                                                          InputGateOptions options = {});
  ~InputGate();

  InputGate(const InputGate&) = delete;
  InputGate& operator=(const InputGate&) = delete;

  // The next buffer of any channel, with that channel's index. Channels take
  // turns, so a busy channel cannot starve the others; each channel's buffers
  // come in order. Waits up to `timeout` (0: just look); nullopt when nothing
  // arrived in time or finished(). Fails when a channel failed: its producer's
  // TaskManager went away or the stream broke before END_OF_INPUT, the
  // partition was released (producer cancelled or failed), or it was not
  // registered within partition_timeout. After a failure every call fails.
  absl::StatusOr<std::optional<std::pair<int, Buffer>>> Next(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Checkpoint alignment: Next skips a blocked channel until
  // UnblockAllChannels. Task thread only.
  void BlockChannel(int channel);
  void UnblockAllChannels();
  bool channel_blocked(int channel) const;
  bool channel_finished(int channel) const;

  // True once every channel has delivered END_OF_INPUT.
  bool finished() const { return unfinished_ == 0; }
  int num_channels() const { return static_cast<int>(channels_.size()); }
  const InputChannelSpec& channel_spec(int channel) const;
  // Buffers received on a channel and not yet taken by Next (for a local
  // channel: waiting in the producer's subpartition).
  int queued_buffers(int channel) const ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels the remote streams, waits until their last completions have run
  // and detaches from local partitions. Idempotent; Next fails afterwards.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Channel;
  class RemoteChannel;

  InputGate(std::string name, PartitionManager* local_partitions, InputGateOptions options);

  // A remote channel has run its last completion (network thread); after
  // this the gate may be gone, so it is the channel's last act.
  void RemoteChannelSettled() ABSL_LOCKS_EXCLUDED(mu_);
  // Finds (and attaches to) a local channel's partition once it is registered.
  absl::Status ResolveLocal(Channel& channel, absl::Time now);
  // Takes the channel's next buffer if it has one.
  absl::StatusOr<std::optional<Buffer>> Take(Channel& channel) ABSL_LOCKS_EXCLUDED(mu_);
  void ReturnCredit(Channel& channel);
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  const std::string name_;
  PartitionManager* const local_partitions_;
  const InputGateOptions options_;
  const absl::Time partition_deadline_;
  // options_.wakeup or the gate's own; Next waits on it.
  const std::shared_ptr<Wakeup> signal_;

  // Outlives the channels (declared before them): their streams live on
  // its completion queues.
  std::shared_ptr<NetworkClient> network_;
  std::vector<std::unique_ptr<Channel>> channels_;
  // Task thread only.
  int unfinished_ = 0;
  int next_channel_ = 0;

  // Guards the remote channels' queues and the fields below. A remote
  // channel's own lock may be held when taking it, never the other way.
  mutable absl::Mutex mu_;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // Remote channels that may still run completions.
  int unsettled_remote_ ABSL_GUARDED_BY(mu_) = 0;
  // The first channel failure.
  absl::Status error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::taskmanager::network
