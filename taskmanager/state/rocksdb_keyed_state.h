// RocksDbKeyedState: keyed state of one operator instance in its own RocksDB
// instance on local disk (the `rocksdb` state backend, the default).
//
// Layout: one column family per state name. A key is
//   <key group, 2 bytes big-endian><varint length of the key><key bytes>
// followed, for map state, by the user key's bytes. Sorting by key group
// first is what lets a restore take a range of key groups, and a map's
// entries sit together under their key.
//
// A snapshot does not flush the memtables on the task thread. Its
// synchronous part (about a millisecond in state_backend_bench) lists the instance's live files
// without a flush — the immutable SST files, and the write-ahead log since
// their last flush, which holds what the memtables hold — and hard-links
// them all, noting the listed size of the files RocksDB goes on appending
// to (the log, MANIFEST). It then asks RocksDB's background threads to
// flush the memtables, so that the next snapshot's log is about one
// interval of writes. The asynchronous part copies the files into the
// shared checkpoint directory (the appended ones up to their listed size;
// for an object store it links them into the staging directory instead,
// io::DurableBatch(false)) and removes the local links. A restore at the same key-group range copies the files back
// and opens them; any other range reads the snapshots' keys and keeps those
// of its own key groups.
//
// Incremental snapshots (RocksDbStateOptions::incremental): SST files are
// immutable, so a snapshot uploads only the SST files that the newest
// checkpoint it was told completed does not hold, into the job's shared
// directory (<checkpoint dir>/../shared/c<checkpoint>-<instance id>-<file>), and refers to
// the rest; the log and the small files (MANIFEST, CURRENT, OPTIONS) are
// copied every time. The JobManager deletes a shared file once no retained checkpoint
// refers to it. The first snapshot after a restore uploads everything; an
// aborted checkpoint forgets only the files it uploaded first.
//
// Files: <instance dir>/db (the instance), <instance dir>/chk-<n> (local
// snapshots until written out). The instance directory is removed when the
// backend and its snapshots are gone.
//
// Thread-safety: as KeyedStateBackend (task thread only; snapshots are
// self-contained).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "taskmanager/state/keyed_state_backend.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace weir::taskmanager {

struct RocksDbStateOptions {
  // Created if missing; must not be used by anything else.
  std::string instance_dir;
  // Memtable size per column family.
  int64_t write_buffer_bytes = 32 << 20;
  // Block cache shared by the instance's column families.
  int64_t block_cache_bytes = 64 << 20;
  // execution.checkpointing.incremental.
  bool incremental = false;
  // Whether the job takes snapshots (it has a checkpoint directory). When it
  // does not, the instance keeps no write-ahead log (~9 % of the write rate
  // in state_backend_bench), and a snapshot, should one come anyway, flushes
  // the memtables on the task thread first.
  bool write_ahead_log = true;
  // state.backend.local-recovery: where the last snapshots stay after their
  // upload (chk-<n>/, hard links to the instance's files), and where a
  // restore of checkpoint n looks first. Empty: off. Must outlive the
  // instance (it is not under instance_dir).
  std::string local_recovery_dir;
};

// The directory under a TaskManager's local state directory that holds
// local recovery copies: <local state dir>/<this>/<job id>/...
inline constexpr char kLocalRecoveryDirName[] = "local-recovery";

class RocksDbKeyedState final : public KeyedStateBackend {
 public:
  static absl::StatusOr<std::unique_ptr<RocksDbKeyedState>> Open(state::KeyGroupRange range, int max_parallelism,
                                                                 RocksDbStateOptions options);
  ~RocksDbKeyedState() override;

  void SetCurrentKey(std::string_view key) override;
  const state::KeyGroupRange& range() const override { return range_; }
  int max_parallelism() const override { return max_parallelism_; }
  std::string_view current_key() const override;

  // Errors from RocksDB are thrown as std::runtime_error (the task fails
  // with the message), as for errors of user code.
  std::optional<std::string> Get(std::string_view state_name) override;
  void Put(std::string_view state_name, std::string_view value) override;
  void Append(std::string_view state_name, std::string_view bytes) override;
  void Remove(std::string_view state_name) override;
  std::optional<std::string> GetEntry(std::string_view state_name, std::string_view user_key) override;
  void PutEntry(std::string_view state_name, std::string_view user_key, std::string_view value) override;
  void RemoveEntry(std::string_view state_name, std::string_view user_key) override;
  std::vector<std::pair<std::string, std::string>> Entries(std::string_view state_name) override;
  void ClearEntries(std::string_view state_name) override;
  void ForEachEntry(std::string_view state_name,
                    absl::FunctionRef<void(std::string_view, std::string_view, std::string_view)> fn) override;
  // Writes go into one rocksdb::WriteBatch until CommitWriteBatch.
  void StartWriteBatch() override;
  void CommitWriteBatch() override;

  void NotifyCheckpointComplete(int64_t checkpoint_id) override;
  void NotifyCheckpointAborted(int64_t checkpoint_id) override;

  const std::string& instance_dir() const { return options_.instance_dir; }
  // Flushes every memtable and waits: tests and benchmarks that need the
  // state in SST files (a snapshot does not flush).
  void FlushForTesting();

 protected:
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> TakeSnapshot(int64_t checkpoint_id) override;
  absl::Status RestoreState(const std::vector<KeyedStateRestore>& parts) override;

 private:
  struct Impl;
  RocksDbKeyedState(state::KeyGroupRange range, int max_parallelism, RocksDbStateOptions options);
  absl::Status OpenDb();
  void CloseDb();
  // Asks RocksDB to flush the non-empty memtables in its own threads.
  void FlushInBackground();
  // Flushes every memtable and waits.
  absl::Status FlushNow();
  // The column family of `state_name`, created on first use; Family also
  // checks that a key was set.
  rocksdb::ColumnFamilyHandle* Family(std::string_view state_name);
  rocksdb::ColumnFamilyHandle* FamilyByName(std::string_view state_name);
  // Restores one snapshot whose key-group range is exactly range().
  absl::Status RestoreWhole(const KeyedStateRestore& part);
  // RestoreWhole from the local recovery copy of the part's checkpoint, when
  // there is one listing the same files; *bytes: what it spared reading.
  absl::Status RestoreLocally(const KeyedStateRestore& part, int64_t* bytes);
  // Copies the keys of range() out of one snapshot of any range.
  absl::Status RestoreKeys(const KeyedStateRestore& part, int index);

  const state::KeyGroupRange range_;
  const int max_parallelism_;
  const RocksDbStateOptions options_;
  std::unique_ptr<Impl> impl_;
  rocksdb::DB* db_ = nullptr;
  absl::flat_hash_map<std::string, rocksdb::ColumnFamilyHandle*> families_;
  std::string last_family_name_;
  rocksdb::ColumnFamilyHandle* last_family_ = nullptr;
  // <key group><varint length><key> of the current key.
  std::string key_prefix_;
  size_t key_offset_ = 0;  // where the key starts in key_prefix_
  bool key_set_ = false;
  std::string scratch_;
  // StartWriteBatch..CommitWriteBatch: where writes go.
  std::unique_ptr<rocksdb::WriteBatch> batch_;

  // Incremental snapshots: names shared files uniquely across instances.
  const std::string instance_id_;
  // SST file -> its name in the shared directory: what the newest completed
  // checkpoint holds (may be referred to), and what each snapshot in flight
  // refers to (becomes the former when its checkpoint completes).
  std::map<std::string, std::string> confirmed_;
  std::map<int64_t, std::map<std::string, std::string>> in_flight_;
};

}  // namespace weir::taskmanager
