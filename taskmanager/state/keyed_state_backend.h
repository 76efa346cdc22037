// KeyedStateBackend: where the keyed state of one operator instance (one
// subtask of a vertex that follows a key_by) lives, and how it is
// snapshotted and restored by key group.
//
// Two implementations, chosen per job with `state.backend.type`:
//   rocksdb  (RocksDbKeyedState) one RocksDB instance per operator instance
//            on local disk; state can exceed memory; a snapshot is a RocksDB
//            checkpoint of hard links (synchronous) copied into the shared
//            checkpoint directory (asynchronous).
//   hashmap  (InMemoryKeyedState) hash maps on the heap per key group; a
//            snapshot serializes the state on the task thread.
//
// Snapshots have two parts. Snapshot() runs on the task thread, between two
// records, and must be short; it returns a KeyedStateSnapshot that the
// TaskManager's uploader thread writes out later. That object holds
// everything it needs: it may outlive the backend (a task cancelled while
// its snapshot is being written).
//
// Entries a write-back cache in front of the backend holds (window
// contents, new timers) need not be written into it for a snapshot: the
// cache hands them over with AddPendingEntry from SnapshotState, the
// snapshot keeps them beside the backend's state, and Restore applies them
// on top (pending_entries.h).
//
// Keys are stored under their key group, so a restore takes exactly the key
// groups of its own range from the snapshots it is given (those of several
// old subtasks when the parallelism changed).
//
// Thread-safety: a backend is used by its task thread only. A
// KeyedStateSnapshot is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/io/durable_batch.h"
#include "common/state/key_groups.h"
#include "taskmanager/state/pending_entries.h"
#include "weir/operator.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::taskmanager {

// The asynchronous part of a keyed state snapshot.
class KeyedStateSnapshot {
 public:
  virtual ~KeyedStateSnapshot() = default;
  // Writes the state into `checkpoint_dir` (file names start with
  // `base_name`) and records what was written in `out`; the files are
  // durable once `batch` is synced (the caller's, with the rest of the
  // task's snapshot).
  // Files in the job's shared directory (incremental snapshots) are listed
  // with their shared_name, and `reused` when an earlier checkpoint uploaded
  // them.
  virtual absl::Status WriteInto(const std::string& checkpoint_dir, const std::string& base_name,
                                 v1::OperatorSnapshotProto* out, io::DurableBatch* batch) = 0;

  // WriteInto with a batch of its own, synced before it returns.
  absl::Status Write(const std::string& checkpoint_dir, const std::string& base_name, v1::OperatorSnapshotProto* out);
};

// One snapshot to restore keyed state from: what a snapshot file recorded
// for the operator, and the directory the checkpoint lives in.
struct KeyedStateRestore {
  v1::OperatorSnapshotProto snapshot;
  std::string checkpoint_dir;
};

class KeyedStateBackend : public KeyedStateStore {
 public:
  // Sets the key that the state calls address. Throws std::logic_error when
  // the key's group is outside range(): a record reached the wrong subtask.
  virtual void SetCurrentKey(std::string_view key) = 0;
  virtual const state::KeyGroupRange& range() const = 0;
  virtual int max_parallelism() const = 0;
  // The key set last; throws std::logic_error before the first.
  virtual std::string_view current_key() const = 0;

  // Calls fn(key, user_key, value) for every entry of map state
  // `state_name` under every key of range(), in no particular order: how a
  // timer service finds its timers after a restore. Does not change the
  // current key; fn must not write state.
  virtual void ForEachEntry(
      std::string_view state_name,
      absl::FunctionRef<void(std::string_view key, std::string_view user_key, std::string_view value)> fn) = 0;

  // Copies the entry into the next snapshot; the backend does not change.
  void AddPendingEntry(std::string_view key, std::string_view state_name, std::string_view user_key,
                       const std::string* value) final {
    pending_.Add(key, state_name, user_key, value);
  }

  // The synchronous part of snapshot `checkpoint_id`: the backend's
  // (TakeSnapshot) and the pending entries added since the last one.
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> Snapshot(int64_t checkpoint_id);

  // Before first use: adds the key groups of range() found in `parts`
  // (RestoreState), then their pending entries. kDataLoss when a snapshot
  // is corrupt or incomplete, kFailedPrecondition when it was written by
  // the other backend.
  absl::Status Restore(const std::vector<KeyedStateRestore>& parts);

  // The fate of a snapshot taken earlier (incremental snapshots build on
  // the newest completed one).
  virtual void NotifyCheckpointComplete(int64_t checkpoint_id) {}
  virtual void NotifyCheckpointAborted(int64_t checkpoint_id) {}

 protected:
  virtual absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> TakeSnapshot(int64_t checkpoint_id) = 0;
  virtual absl::Status RestoreState(const std::vector<KeyedStateRestore>& parts) = 0;

 private:
  PendingEntries pending_;
};

}  // namespace weir::taskmanager
