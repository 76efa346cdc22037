// ResultPartition: the output of one producer task, split into one
// subpartition per consumer subtask, each a bounded FIFO of Buffers.
// PartitionManager: the TaskManager's registry of the partitions its tasks
// produce, where local input gates and the DataExchangeService find them.
//
// Bounded subpartitions are what make backpressure work: Add blocks the
// producer's task thread while its subpartition is full, so a consumer that
// falls behind (locally, or remotely by withholding credit) slows the producer
// down instead of growing memory.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "taskmanager/network/buffer.h"

namespace weir::taskmanager::network {

// How a consumer's input fails when the partition it reads was released
// before its end of input (the producer was cancelled or failed; the
// producer's own report says why): part of every such error's message, in
// kAborted statuses, so the consumer can tell it from a failure of its own.
inline constexpr char kReleasedBeforeEndOfInput[] = "was released before end of input";

// Whether `status` is such a failure.
inline bool IsReleasedBeforeEndOfInput(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted &&
         absl::StrContains(status.message(), kReleasedBeforeEndOfInput);
}

// Thread-safety: all methods are thread-safe. The producer's task thread
// calls Add; each subpartition has at most one consumer (a local InputGate or
// one DataExchangeService stream) that calls Poll. Release may come from any
// thread (cancellation). Availability listeners run on the thread that added
// the buffer or released the partition, without the partition's lock held;
// they must be quick and must not call Add.
class ResultPartition {
 public:
  static constexpr int kDefaultCapacity = 4;

  // Called when a subpartition turns non-empty, and on Release.
  using AvailabilityListener = std::function<void()>;

  // `capacity` is the number of buffers each subpartition holds before Add
  // blocks (default 4); it must be >= 1.
  ResultPartition(std::string id, int num_subpartitions, int capacity = kDefaultCapacity);

  ResultPartition(const ResultPartition&) = delete;
  ResultPartition& operator=(const ResultPartition&) = delete;

  const std::string& id() const { return id_; }
  int num_subpartitions() const { return num_subpartitions_; }
  int capacity() const { return capacity_; }

  // Appends `buffer` to a subpartition, blocking while it is full (unless
  // `over_capacity`, or while AdmitOverCapacity holds). Returns false,
  // dropping the buffer, once the partition has been released.
  //
  // Over capacity is for what a checkpoint barrier needs to go out at once:
  // the barrier itself and the partly filled buffers flushed before it (as
  // in Flink, an event does not wait for room; it queues behind the data).
  // That is at most two buffers per subpartition and checkpoint.
  bool Add(int subpartition, Buffer buffer, bool over_capacity = false) ABSL_LOCKS_EXCLUDED(mu_);

  // While `admit` holds, Add never blocks, and a producer blocked in Add
  // goes on at once. A source task sets it when a checkpoint trigger is
  // posted to it, so that it does not wait for its consumers to free room
  // before it takes the trigger, and clears it before it runs its mails:
  // what it adds over capacity meanwhile is the rest of one poll (or, when
  // the trigger is posted while its loop runs its mails, the next poll).
  void AdmitOverCapacity(bool admit) ABSL_LOCKS_EXCLUDED(mu_);

  // The oldest buffer of a subpartition, or nullopt when it is empty or the
  // partition was released. Never blocks.
  std::optional<Buffer> Poll(int subpartition) ABSL_LOCKS_EXCLUDED(mu_);

  // Makes the caller the consumer of a subpartition: `listener` is called
  // every time the subpartition turns non-empty and on Release, so that the
  // consumer can wait instead of spinning. Attach first, then Poll: a buffer
  // added before the attach is found by that Poll. Fails
  // (kFailedPrecondition) if the subpartition already has a consumer.
  absl::Status AttachConsumer(int subpartition, AvailabilityListener listener) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends that; the listener may still be running (or about to run) once on
  // another thread, so it must only touch state it co-owns.
  void DetachConsumer(int subpartition) ABSL_LOCKS_EXCLUDED(mu_);

  // Cancel or failure: drops every buffered buffer, makes blocked and future
  // Adds return false, and wakes every consumer. Idempotent.
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  bool released() const ABSL_LOCKS_EXCLUDED(mu_);

  // Buffers waiting in a subpartition (for metrics and tests).
  int buffered(int subpartition) const ABSL_LOCKS_EXCLUDED(mu_);
  // True while the producer is blocked in Add (backpressured).
  bool backpressured() const ABSL_LOCKS_EXCLUDED(mu_);
  // How long producers have been blocked in Add in all, the current wait
  // included.
  absl::Duration backpressured_time() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Subpartition {
    std::deque<Buffer> queue;
    std::shared_ptr<const AvailabilityListener> listener;
  };

  void CheckIndex(int subpartition) const;

  const std::string id_;
  const int num_subpartitions_;
  const int capacity_;

  mutable absl::Mutex mu_;
  std::vector<Subpartition> subpartitions_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  bool admit_over_capacity_ ABSL_GUARDED_BY(mu_) = false;
  int blocked_producers_ ABSL_GUARDED_BY(mu_) = 0;
  // Ended waits in Add, and when the current one started (while blocked).
  absl::Duration blocked_time_ ABSL_GUARDED_BY(mu_);
  absl::Time blocked_since_ ABSL_GUARDED_BY(mu_);
};

// One per TaskManager. Producer tasks register their partitions when they
// start and unregister them when all consumers are done (or on cancel);
// consumers may ask for a partition before its producer has registered it.
//
// Thread-safety: all methods are thread-safe. Registration listeners run on
// the registering thread without the manager's lock held.
class PartitionManager {
 public:
  using ListenerId = uint64_t;

  PartitionManager() = default;
  PartitionManager(const PartitionManager&) = delete;
  PartitionManager& operator=(const PartitionManager&) = delete;

  // Fails (kAlreadyExists) if a partition with the same id is registered.
  absl::Status Register(std::shared_ptr<ResultPartition> partition) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes a partition from the registry (it is not released); returns it,
  // or null if it was not registered.
  std::shared_ptr<ResultPartition> Unregister(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // The registered partition, or null.
  std::shared_ptr<ResultPartition> Lookup(const std::string& id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until the partition is registered; fails with kNotFound at `deadline`.
  absl::StatusOr<std::shared_ptr<ResultPartition>> WaitFor(const std::string& id, absl::Time deadline) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `listener` once, when a partition with `id` is registered after
  // this call. For waiting on several things at once: add the listener, then
  // Lookup. A removed listener may still be running on another thread.
  ListenerId AddRegistrationListener(const std::string& id, std::function<void()> listener) ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveRegistrationListener(ListenerId listener_id) ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct RegistrationListener {
    std::string partition_id;
    std::function<void()> fn;
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<ResultPartition>> partitions_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ListenerId, RegistrationListener> listeners_ ABSL_GUARDED_BY(mu_);
  ListenerId next_listener_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace weir::taskmanager::network
