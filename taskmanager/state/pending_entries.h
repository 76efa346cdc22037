// PendingEntries: map-state entries that a write-back cache in front of a
// keyed state backend holds and the backend does not, kept beside the
// backend's state in a snapshot instead of written into it.
//
// A checkpoint's synchronous part must be short, and writing tens of
// thousands of cached window accumulators or new timers into RocksDB is
// not (a memtable insert each). So at SnapshotState the caches hand their
// changed entries to the backend (KeyedStateStore::AddPendingEntry), which
// only copies their bytes; the backend's Snapshot() takes the copy along
// (OperatorSnapshotProto.pending_entries, written by the asynchronous
// part), and a restore applies the entries on top of the restored state,
// key group by key group like the rest of it. The cache stays the
// authority for its entries and writes them into the backend later (when
// it is full), or never (a window opened and fired between two writes).
//
// Format: one record per entry — the key (varint-length-prefixed), the
// state name as a varint reference (n < names so far: the n-th; n equal to
// their number: a new name follows, length-prefixed; a few names take
// thousands of entries), the user key (length-prefixed), then 'p' and the
// value (length-prefixed), or 'r' for an entry that was removed.
//
// Thread-safety: the owning backend's task thread only.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace weir::taskmanager {

class PendingEntries {
 public:
  // `value` null: the entry was removed.
  void Add(std::string_view key, std::string_view state_name, std::string_view user_key, const std::string* value);
  // The entries added since the last Take, and none left.
  std::string Take();

  // Calls fn for each entry of `bytes` (as Take returned them), in the order
  // they were added; `value` null for a removed entry. kDataLoss when the
  // bytes are malformed (fn may have been called for the entries before).
  static absl::Status ForEach(std::string_view bytes,
                              absl::FunctionRef<void(std::string_view key, std::string_view state_name,
                                                     std::string_view user_key, const std::string_view* value)>
                                  fn);

 private:
  std::string bytes_;
  std::vector<std::string> names_;  // referenced by bytes_
};

}  // namespace weir::taskmanager
