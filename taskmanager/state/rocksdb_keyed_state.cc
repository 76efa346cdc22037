#include "taskmanager/state/rocksdb_keyed_state.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "common/io/atomic_file.h"
#include "common/logging/logging.h"
#include "common/random_id.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/file_system.h"
#include "rocksdb/memtablerep.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/merge_operator.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"
#include "weir/serializer.h"

namespace weir::taskmanager {
namespace {

namespace fs = std::filesystem;

constexpr char kBackendName[] = "rocksdb";
// Column families of state are named by this prefix and the state's name,
// so that no state name can clash with RocksDB's "default".
constexpr char kFamilyPrefix[] = "state:";

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(what, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsIOError()) return absl::UnavailableError(message);
  return absl::InternalError(message);
}

absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

[[noreturn]] void Throw(const rocksdb::Status& s, std::string_view what) {
  throw std::runtime_error(absl::StrCat("RocksDB state backend: ", AV(what), ": ", s.ToString()));
}

// Append: the new bytes follow the old value.
class ConcatenateOperator final : public rocksdb::AssociativeMergeOperator {
 public:
  bool Merge(const rocksdb::Slice&, const rocksdb::Slice* existing, const rocksdb::Slice& value,
             std::string* new_value, rocksdb::Logger*) const override {
    new_value->clear();
    if (existing != nullptr) new_value->assign(existing->data(), existing->size());
    new_value->append(value.data(), value.size());
    return true;
  }
  const char* Name() const override { return "WeirConcatenate"; }
};

// The length of a stored key's <key group, 2 bytes><varint key length><key>
// part — everything but a map entry's user key; 0 when `key` is not one of
// ours (too short or truncated). Does not throw: RocksDB calls it.
size_t KeyPrefixLength(std::string_view key) {
  size_t pos = 2;
  uint64_t length = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos >= key.size()) return 0;
    const uint8_t b = static_cast<uint8_t>(key[pos++]);
    length |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) break;
  }
  if (length > key.size() - pos) return 0;
  return pos + length;
}

// The part of a stored key that names the record's key (KeyPrefixLength).
// Memtables hash by it, so that a point lookup does not search one big
// sorted list, and map state's entries of one key stay together.
class KeyPrefix final : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "WeirKeyPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return rocksdb::Slice(key.data(), KeyPrefixLength(std::string_view(key.data(), key.size())));
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return KeyPrefixLength(std::string_view(key.data(), key.size())) > 0;
  }
};

// A name read from a snapshot file becomes part of a path: refuse anything
// that could leave the directory.
bool IsPlainName(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." && name[0] != '.';
}

int KeyGroupOf(const rocksdb::Slice& key) {
  if (key.size() < 2) return -1;
  return (static_cast<uint8_t>(key[0]) << 8) | static_cast<uint8_t>(key[1]);
}

const std::shared_ptr<spdlog::logger>& Log() {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("state");
  return log;
}

void RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// RocksDB instances here are scratch space: restored from checkpoints, not
// from their own log after a crash, deleted when their task ends, and wiped
// with the whole local state directory when a TaskManager starts. Nothing
// needs them durable on the local disk (a SIGKILL loses no page cache; a
// host crash loses the TaskManager too), so their files (the log included)
// and directories are never fsynced: nothing on the task thread waits for
// the disk. What a checkpoint keeps is made durable where it is kept, by
// the asynchronous part's copies.
class UnsyncedFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  using rocksdb::FSWritableFileOwnerWrapper::FSWritableFileOwnerWrapper;
  rocksdb::IOStatus Sync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
};

class UnsyncedDirectory final : public rocksdb::FSDirectoryWrapper {
 public:
  using rocksdb::FSDirectoryWrapper::FSDirectoryWrapper;
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions&, rocksdb::IODebugContext*) override {
    return rocksdb::IOStatus::OK();
  }
  rocksdb::IOStatus FsyncWithDirOptions(const rocksdb::IOOptions&, rocksdb::IODebugContext*,
                                        const rocksdb::DirFsyncOptions&) override {
    return rocksdb::IOStatus::OK();
  }
};

class UnsyncedFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  UnsyncedFileSystem() : rocksdb::FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "WeirUnsyncedFileSystem"; }

  rocksdb::IOStatus NewWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->NewWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& options,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReopenWritableFile(name, options, result, dbg), result);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& name, const std::string& old_name,
                                      const rocksdb::FileOptions& options,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override {
    return Wrap(target()->ReuseWritableFile(name, old_name, options, result, dbg), result);
  }
  rocksdb::IOStatus NewDirectory(const std::string& name, const rocksdb::IOOptions& options,
                                 std::unique_ptr<rocksdb::FSDirectory>* result,
                                 rocksdb::IODebugContext* dbg) override {
    rocksdb::IOStatus status = target()->NewDirectory(name, options, result, dbg);
    if (status.ok()) *result = std::make_unique<UnsyncedDirectory>(std::move(*result));
    return status;
  }

 private:
  static rocksdb::IOStatus Wrap(rocksdb::IOStatus status, std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (status.ok()) *result = std::make_unique<UnsyncedFile>(std::move(*result));
    return status;
  }
};

// One for the process; RocksDB keeps a pointer to it in every instance.
rocksdb::Env* UnsyncedEnv() {
  static const std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(std::make_shared<UnsyncedFileSystem>());
  return env.get();
}

// Local recovery copies and checkpoint directories are named chk-<n>.
std::string CheckpointDirName(const std::string& parent, int64_t id) { return absl::StrCat(parent, "/chk-", id); }

// The n of a directory named chk-<n>, or nullopt.
std::optional<int64_t> CheckpointIdOf(const fs::path& dir) {
  absl::string_view name = dir.filename().native();
  int64_t id = 0;
  if (!absl::ConsumePrefix(&name, "chk-") || !absl::SimpleAtoi(name, &id)) return std::nullopt;
  return id;
}

// Incremental snapshots: how a local SST file is written out.
struct SharedFile {
  std::string shared_name;
  bool reused = false;  // an earlier checkpoint uploaded it
};

// The asynchronous part: the local checkpoint's files, copied out.
class RocksDbSnapshot final : public KeyedStateSnapshot {
 public:
  RocksDbSnapshot(std::string instance_dir, std::string local_dir, state::KeyGroupRange range,
                  std::map<std::string, SharedFile> shared, std::map<std::string, int64_t> prefixes,
                  int64_t checkpoint_id, std::string local_recovery_dir)
      : instance_dir_(std::move(instance_dir)),
        local_dir_(std::move(local_dir)),
        range_(range),
        shared_(std::move(shared)),
        prefixes_(std::move(prefixes)),
        checkpoint_id_(checkpoint_id),
        local_recovery_dir_(std::move(local_recovery_dir)) {}
  ~RocksDbSnapshot() override {
    RemoveTree(local_dir_);
    rmdir(instance_dir_.c_str());  // the last one out (fails while the backend lives)
  }

  absl::Status WriteInto(const std::string& checkpoint_dir, const std::string& base_name,
                         v1::OperatorSnapshotProto* out, io::DurableBatch* batch) override {
    const std::string relative = absl::StrCat(base_name, "-rocksdb");
    const std::string target = absl::StrCat(checkpoint_dir, "/", relative);
    std::error_code ec;
    fs::create_directories(target, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("creating ", target, ": ", ec.message()));
    v1::KeyedStateFilesProto* files = out->mutable_keyed_files();
    files->set_backend(kBackendName);
    files->set_directory(relative);
    files->set_key_group_start(range_.start);
    files->set_key_group_end(range_.end);
    const std::string shared_dir = (fs::path(checkpoint_dir).parent_path() / "shared").string();
    bool uploaded_shared = false;
    for (fs::directory_iterator it(local_dir_, ec), end; !ec && it != end; it.increment(ec)) {
      const fs::directory_entry& entry = *it;
      const std::string name = entry.path().filename().string();
      v1::StateFileProto* file = files->add_files();
      file->set_name(name);
      auto shared = shared_.find(name);
      if (shared == shared_.end()) {
        auto prefix = prefixes_.find(name);
        ASSIGN_OR_RETURN(int64_t size, batch->Copy(entry.path().string(), absl::StrCat(target, "/", name),
                                                    prefix == prefixes_.end() ? -1 : prefix->second));
        file->set_size_bytes(size);
        continue;
      }
      file->set_shared_name(shared->second.shared_name);
      file->set_reused(shared->second.reused);
      if (shared->second.reused) {
        std::error_code size_ec;
        const auto size = fs::file_size(entry.path(), size_ec);
        if (size_ec) return absl::UnavailableError(absl::StrCat("reading ", entry.path().string(), ": ", size_ec.message()));
        file->set_size_bytes(static_cast<int64_t>(size));
        continue;
      }
      if (!uploaded_shared) {
        const bool created = fs::create_directories(shared_dir, ec);
        if (ec) return absl::UnavailableError(absl::StrCat("creating ", shared_dir, ": ", ec.message()));
        // The job directory's entry of a shared directory made here.
        if (created) batch->SyncDirectoryAtEnd(fs::path(checkpoint_dir).parent_path().string());
        uploaded_shared = true;
      }
      // Written under a temporary name and renamed once durable: a shared
      // file is whole or absent, whoever else (an earlier attempt) wrote it.
      const std::string final_path = absl::StrCat(shared_dir, "/", shared->second.shared_name);
      ASSIGN_OR_RETURN(int64_t size, batch->CopyThenRename(entry.path().string(),
                                                           absl::StrCat(final_path, ".tmp-", RandomId()), final_path));
      file->set_size_bytes(size);
    }
    if (ec) return absl::UnavailableError(absl::StrCat("listing ", local_dir_, ": ", ec.message()));
    // The copies (and the directories they are in) are synced with the
    // task's snapshot file, by the caller.
    KeepLocally();
    RemoveTree(local_dir_);
    return absl::OkStatus();
  }

 private:
  // Local recovery: the uploaded files stay, moved (a rename: they are hard
  // links to the instance's own) to <local_recovery_dir>/chk-<n>. A failure
  // here costs only the next restore's speed. Scratch space, like the
  // instance: nothing here is synced.
  void KeepLocally() {
    if (local_recovery_dir_.empty()) return;
    const std::string kept = CheckpointDirName(local_recovery_dir_, checkpoint_id_);
    std::error_code ec;
    // The links to files RocksDB still appends to become copies of what the
    // checkpoint holds of them (renamed over the link: never written through
    // it, which would write into the live instance).
    for (const auto& [name, bytes] : prefixes_) {
      const std::string link = absl::StrCat(local_dir_, "/", name), copy = absl::StrCat(link, ".copy");
      absl::StatusOr<int64_t> copied = io::CopyFile(link, copy, bytes);
      if (!copied.ok() || std::rename(copy.c_str(), link.c_str()) != 0) {
        std::remove(copy.c_str());
        Log()->warn("keeping the snapshot of checkpoint {} for local recovery: copying {} failed", checkpoint_id_,
                    link);
        return;  // the local directory goes with the snapshot
      }
    }
    fs::create_directories(local_recovery_dir_, ec);
    RemoveTree(kept);  // an earlier attempt's copy of an id taken again
    if (!ec) fs::rename(local_dir_, kept, ec);
    if (ec) {
      Log()->warn("keeping the snapshot of checkpoint {} for local recovery in {} failed: {}", checkpoint_id_, kept,
                  ec.message());
    }
  }

  const std::string instance_dir_;
  const std::string local_dir_;
  const state::KeyGroupRange range_;
  const std::map<std::string, SharedFile> shared_;
  // Files linked while RocksDB still appends to them (the log, MANIFEST):
  // the bytes the snapshot holds of each.
  const std::map<std::string, int64_t> prefixes_;
  const int64_t checkpoint_id_;
  const std::string local_recovery_dir_;
};

}  // namespace

struct RocksDbKeyedState::Impl {
  rocksdb::DBOptions db_options;
  rocksdb::ColumnFamilyOptions family_options;
  rocksdb::WriteOptions write;
  rocksdb::ReadOptions read;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // every open family, "default" included
};

RocksDbKeyedState::RocksDbKeyedState(state::KeyGroupRange range, int max_parallelism, RocksDbStateOptions options)
    : range_(range),
      max_parallelism_(max_parallelism),
      options_(std::move(options)),
      impl_(std::make_unique<Impl>()),
      instance_id_(RandomId()) {
  impl_->db_options.env = UnsyncedEnv();
  impl_->db_options.create_if_missing = true;
  impl_->db_options.create_missing_column_families = true;
  impl_->db_options.max_background_jobs = 2;
  impl_->db_options.max_open_files = 512;
  impl_->db_options.keep_log_file_num = 2;
  impl_->db_options.info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(static_cast<size_t>(options_.block_cache_bytes));
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  // Every record reads its key's state: a Bloom filter per file spares the
  // files (L0 above all, one per checkpoint's flush) that do not hold it.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10, false));
  impl_->family_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  impl_->family_options.write_buffer_size = static_cast<size_t>(options_.write_buffer_bytes);
  impl_->family_options.merge_operator = std::make_shared<ConcatenateOperator>();
  impl_->family_options.prefix_extractor = std::make_shared<KeyPrefix>();
  // Point lookups dominate (every record reads its key's state): a hash of
  // per-key lists instead of one sorted list of the whole memtable makes
  // them ~1.7x faster in keyed_count (bench/README.md); the price is a
  // flush that sorts (in RocksDB's background threads).
  impl_->family_options.memtable_factory.reset(rocksdb::NewHashSkipListRepFactory(1 << 14));
  impl_->db_options.allow_concurrent_memtable_write = false;  // hash memtables do not support it
  // CPU is scarcer than disk here: compress only the bottom level.
  impl_->family_options.compression = rocksdb::kNoCompression;
  impl_->family_options.bottommost_compression = rocksdb::kLZ4Compression;
  // The write-ahead log is what lets a snapshot skip the memtable flush on
  // the task thread: a checkpoint takes the SST files as they are plus a copy
  // of the log since their last flush, and a restore replays it. Writes
  // only append to an in-memory buffer (manual_wal_flush), written out when
  // it fills and by the checkpoint. The log is never synced (UnsyncedFileSystem):
  // the instance is scratch space, state comes back from checkpoints.
  impl_->db_options.manual_wal_flush = true;
  // A restore must not stop quietly at a damaged record of a checkpoint's
  // log (the default recovers up to it): every record or a kDataLoss.
  impl_->db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kAbsoluteConsistency;
  // A restore replays the checkpoint's log into the memtables and leaves
  // them there (flushed later like any other), rather than sorting them into
  // a file before the task may start.
  impl_->db_options.avoid_flush_during_recovery = true;
  impl_->write.disableWAL = !options_.write_ahead_log;
}

absl::StatusOr<std::unique_ptr<RocksDbKeyedState>> RocksDbKeyedState::Open(state::KeyGroupRange range,
                                                                          int max_parallelism,
                                                                          RocksDbStateOptions options) {
  if (options.instance_dir.empty()) return absl::InvalidArgumentError("the RocksDB state backend needs a directory");
  if (max_parallelism > 0xffff) {
    return absl::InvalidArgumentError(absl::StrCat("max parallelism ", max_parallelism,
                                                   " exceeds the 65535 key groups the RocksDB backend addresses"));
  }
  // A directory left by a process that died is stale: this instance owns it.
  RemoveTree(options.instance_dir);
  std::error_code ec;
  fs::create_directories(options.instance_dir, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("creating the state directory ", options.instance_dir, ": ",
                                               ec.message(), " (taskmanager.state.local.root-dirs)"));
  }
  std::unique_ptr<RocksDbKeyedState> backend(new RocksDbKeyedState(range, max_parallelism, std::move(options)));
  RETURN_IF_ERROR(backend->OpenDb());
  return backend;
}

RocksDbKeyedState::~RocksDbKeyedState() {
  CloseDb();
  RemoveTree(absl::StrCat(options_.instance_dir, "/db"));
  rmdir(options_.instance_dir.c_str());  // stays while a snapshot is still being written
  // The job's directory, once its last instance here is gone.
  rmdir(fs::path(options_.instance_dir).parent_path().c_str());
}

absl::Status RocksDbKeyedState::OpenDb() {
  const std::string path = absl::StrCat(options_.instance_dir, "/db");
  std::vector<std::string> names;
  rocksdb::Status listed = rocksdb::DB::ListColumnFamilies(impl_->db_options, path, &names);
  if (!listed.ok()) names = {rocksdb::kDefaultColumnFamilyName};  // a new instance
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : names) descriptors.emplace_back(name, impl_->family_options);
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(impl_->db_options, path, descriptors, &impl_->handles, &db_),
                            absl::StrCat("opening the RocksDB state instance ", path)));
  for (rocksdb::ColumnFamilyHandle* handle : impl_->handles) {
    if (absl::StartsWith(handle->GetName(), kFamilyPrefix)) {
      families_[handle->GetName().substr(sizeof(kFamilyPrefix) - 1)] = handle;
    }
  }
  return absl::OkStatus();
}

void RocksDbKeyedState::CloseDb() {
  if (db_ == nullptr) return;
  for (rocksdb::ColumnFamilyHandle* handle : impl_->handles) db_->DestroyColumnFamilyHandle(handle);
  impl_->handles.clear();
  families_.clear();
  last_family_ = nullptr;
  last_family_name_.clear();
  db_->Close();
  delete db_;
  db_ = nullptr;
}

void RocksDbKeyedState::SetCurrentKey(std::string_view key) {
  const int group = state::KeyGroupForKey(absl::string_view(key.data(), key.size()), max_parallelism_);
  if (!range_.Contains(group)) {
    throw std::logic_error(absl::StrCat("a record with key group ", group, " reached the subtask owning key groups ",
                                        range_.DebugString(), "; the job's max parallelism differs between its "
                                        "producer and consumer"));
  }
  key_prefix_.clear();
  key_prefix_.push_back(static_cast<char>((group >> 8) & 0xff));
  key_prefix_.push_back(static_cast<char>(group & 0xff));
  weir::internal::WriteVarint(key.size(), key_prefix_);
  key_offset_ = key_prefix_.size();
  key_prefix_.append(key);
  key_set_ = true;
}

std::string_view RocksDbKeyedState::current_key() const {
  if (!key_set_) throw std::logic_error("keyed state used before a key was set");
  return std::string_view(key_prefix_).substr(key_offset_);
}

rocksdb::ColumnFamilyHandle* RocksDbKeyedState::Family(std::string_view state_name) {
  if (!key_set_) throw std::logic_error("keyed state used before a key was set");
  return FamilyByName(state_name);
}

rocksdb::ColumnFamilyHandle* RocksDbKeyedState::FamilyByName(std::string_view state_name) {
  if (last_family_ != nullptr && state_name == last_family_name_) return last_family_;
  auto it = families_.find(AV(state_name));
  rocksdb::ColumnFamilyHandle* handle = nullptr;
  if (it != families_.end()) {
    handle = it->second;
  } else {
    rocksdb::Status s =
        db_->CreateColumnFamily(impl_->family_options, absl::StrCat(kFamilyPrefix, AV(state_name)), &handle);
    if (!s.ok()) Throw(s, absl::StrCat("creating the column family of state '", AV(state_name), "'"));
    impl_->handles.push_back(handle);
    families_.emplace(std::string(state_name), handle);
  }
  last_family_name_.assign(state_name.data(), state_name.size());
  last_family_ = handle;
  return handle;
}

std::optional<std::string> RocksDbKeyedState::Get(std::string_view state_name) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  std::string value;
  rocksdb::Status s = db_->Get(impl_->read, family, key_prefix_, &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) Throw(s, absl::StrCat("reading state '", AV(state_name), "'"));
  return value;
}

void RocksDbKeyedState::Put(std::string_view state_name, std::string_view value) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  rocksdb::Status s = batch_ ? batch_->Put(family, key_prefix_, rocksdb::Slice(value.data(), value.size()))
                             : db_->Put(impl_->write, family, key_prefix_, rocksdb::Slice(value.data(), value.size()));
  if (!s.ok()) Throw(s, absl::StrCat("writing state '", AV(state_name), "'"));
}

void RocksDbKeyedState::Append(std::string_view state_name, std::string_view bytes) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  rocksdb::Status s = batch_ ? batch_->Merge(family, key_prefix_, rocksdb::Slice(bytes.data(), bytes.size()))
                             : db_->Merge(impl_->write, family, key_prefix_, rocksdb::Slice(bytes.data(), bytes.size()));
  if (!s.ok()) Throw(s, absl::StrCat("appending to state '", AV(state_name), "'"));
}

void RocksDbKeyedState::Remove(std::string_view state_name) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  rocksdb::Status s = batch_ ? batch_->Delete(family, key_prefix_) : db_->Delete(impl_->write, family, key_prefix_);
  if (!s.ok()) Throw(s, absl::StrCat("removing state '", AV(state_name), "'"));
}

std::optional<std::string> RocksDbKeyedState::GetEntry(std::string_view state_name, std::string_view user_key) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  scratch_.assign(key_prefix_).append(user_key);
  std::string value;
  rocksdb::Status s = db_->Get(impl_->read, family, scratch_, &value);
  if (s.IsNotFound()) return std::nullopt;
  if (!s.ok()) Throw(s, absl::StrCat("reading map state '", AV(state_name), "'"));
  return value;
}

void RocksDbKeyedState::PutEntry(std::string_view state_name, std::string_view user_key, std::string_view value) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  scratch_.assign(key_prefix_).append(user_key);
  rocksdb::Status s = batch_ ? batch_->Put(family, scratch_, rocksdb::Slice(value.data(), value.size()))
                             : db_->Put(impl_->write, family, scratch_, rocksdb::Slice(value.data(), value.size()));
  if (!s.ok()) Throw(s, absl::StrCat("writing map state '", AV(state_name), "'"));
}

void RocksDbKeyedState::RemoveEntry(std::string_view state_name, std::string_view user_key) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  scratch_.assign(key_prefix_).append(user_key);
  rocksdb::Status s = batch_ ? batch_->Delete(family, scratch_) : db_->Delete(impl_->write, family, scratch_);
  if (!s.ok()) Throw(s, absl::StrCat("removing from map state '", AV(state_name), "'"));
}

std::vector<std::pair<std::string, std::string>> RocksDbKeyedState::Entries(std::string_view state_name) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(impl_->read, family));
  const rocksdb::Slice prefix(key_prefix_);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    rocksdb::Slice user_key = it->key();
    user_key.remove_prefix(prefix.size());
    out.emplace_back(user_key.ToString(), it->value().ToString());
  }
  if (!it->status().ok()) Throw(it->status(), absl::StrCat("reading map state '", AV(state_name), "'"));
  return out;
}

void RocksDbKeyedState::ClearEntries(std::string_view state_name) {
  rocksdb::ColumnFamilyHandle* family = Family(state_name);
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(impl_->read, family));
  const rocksdb::Slice prefix(key_prefix_);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) batch.Delete(family, it->key());
  if (!it->status().ok()) Throw(it->status(), absl::StrCat("reading map state '", AV(state_name), "'"));
  rocksdb::Status s = db_->Write(impl_->write, &batch);
  if (!s.ok()) Throw(s, absl::StrCat("clearing map state '", AV(state_name), "'"));
}

void RocksDbKeyedState::ForEachEntry(
    std::string_view state_name, absl::FunctionRef<void(std::string_view, std::string_view, std::string_view)> fn) {
  auto family = families_.find(AV(state_name));
  if (family == families_.end()) return;  // never written
  rocksdb::ReadOptions read = impl_->read;
  read.total_order_seek = true;  // across keys, past the prefix extractor
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read, family->second));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    // <key group, 2 bytes><varint key length><key><user key>
    const std::string_view stored(it->key().data(), it->key().size());
    const size_t prefix = KeyPrefixLength(stored);
    if (prefix == 0) throw std::runtime_error(absl::StrCat("map state '", AV(state_name), "' holds a malformed key"));
    size_t pos = 2;
    const std::string_view key = weir::internal::ReadField(stored.substr(0, prefix), &pos);
    fn(key, stored.substr(prefix), std::string_view(it->value().data(), it->value().size()));
  }
  if (!it->status().ok()) Throw(it->status(), absl::StrCat("reading map state '", AV(state_name), "'"));
}

void RocksDbKeyedState::StartWriteBatch() {
  if (!batch_) batch_ = std::make_unique<rocksdb::WriteBatch>();
}

void RocksDbKeyedState::CommitWriteBatch() {
  if (!batch_) return;
  std::unique_ptr<rocksdb::WriteBatch> batch = std::move(batch_);
  if (batch->Count() == 0) return;
  rocksdb::Status s = db_->Write(impl_->write, batch.get());
  if (!s.ok()) Throw(s, "writing a batch of state");
}

absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> RocksDbKeyedState::TakeSnapshot(int64_t checkpoint_id) {
  // A batch left open would be missing from the snapshot.
  CommitWriteBatch();
  const std::string local = CheckpointDirName(options_.instance_dir, checkpoint_id);
  RemoveTree(local);
  std::error_code ec;
  fs::create_directories(local, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", local, ": ", ec.message()));
  // The instance's files as they stand, without a flush (wal_size_for_flush:
  // never): the SST files, and the log since their last flush, which holds
  // what the memtables hold. The log's buffer is written out first
  // (manual_wal_flush; RocksDB 7.8's listing does it too, but does not
  // promise it), and this thread is the only writer, so the listed sizes
  // hold every write so far and none after. Everything is hard-linked here;
  // the newest log and MANIFEST, which RocksDB may go on appending to, are
  // copied up to their listed size by the asynchronous part. No file may go
  // between listing and linking (a compaction's clean-up).
  absl::Status status =
      impl_->write.disableWAL ? FlushNow() : FromRocks(db_->FlushWAL(/*sync=*/false), "writing out RocksDB's log");
  if (status.ok()) status = FromRocks(db_->DisableFileDeletions(), "holding RocksDB's files");
  if (!status.ok()) {
    RemoveTree(local);
    return status;
  }
  // Deletions come back however this ends (an exception included): held,
  // the instance would keep every file it ever wrote.
  struct Release {
    rocksdb::DB* db;
    rocksdb::Status* status;
    ~Release() { *status = db->EnableFileDeletions(/*force=*/false); }
  };
  rocksdb::Status enabled;
  std::vector<rocksdb::LiveFileStorageInfo> files;
  std::map<std::string, int64_t> prefixes;
  std::map<std::string, SharedFile> shared;  // incremental: the SST files, by name
  {
    Release release{db_, &enabled};
    rocksdb::LiveFilesStorageInfoOptions list;
    list.wal_size_for_flush = std::numeric_limits<uint64_t>::max();
    status = FromRocks(db_->GetLiveFilesStorageInfo(list, &files), "listing RocksDB's files");
    for (size_t i = 0; status.ok() && i < files.size(); ++i) {
      const rocksdb::LiveFileStorageInfo& file = files[i];
      const std::string to = absl::StrCat(local, "/", file.relative_filename);
      if (!file.replacement_contents.empty()) {  // CURRENT, as it must read in the copy
        // Not synced, like the rest of the local copy: the asynchronous part
        // syncs what it writes out.
        std::ofstream out(to, std::ios::binary | std::ios::trunc);
        out << file.replacement_contents;
        out.close();
        if (!out) status = absl::UnavailableError(absl::StrCat("writing ", to));
        continue;
      }
      const std::string from = absl::StrCat(file.directory, "/", file.relative_filename);
      fs::create_hard_link(from, to, ec);
      if (ec) status = absl::UnavailableError(absl::StrCat("linking ", from, ": ", ec.message()));
      if (file.trim_to_size) prefixes[file.relative_filename] = static_cast<int64_t>(file.size);
      if (options_.incremental && file.file_type == rocksdb::kTableFile) {
        SharedFile& entry = shared[file.relative_filename];
        auto known = confirmed_.find(file.relative_filename);
        entry.reused = known != confirmed_.end();
        // "c<checkpoint>-": the checkpoint that uploaded it, by which an
        // object store's garbage collection tells an upload still under way
        // (CheckpointStorage::CollectSharedGarbage).
        entry.shared_name = entry.reused
                                ? known->second
                                : absl::StrCat("c", checkpoint_id, "-", instance_id_, "-", file.relative_filename);
      }
    }
  }
  if (status.ok()) status = FromRocks(enabled, "releasing RocksDB's files");
  if (!status.ok()) {
    RemoveTree(local);
    return status;
  }
  FlushInBackground();
  if (options_.incremental) {
    std::map<std::string, std::string>& refers = in_flight_[checkpoint_id];
    for (const auto& [name, file] : shared) refers[name] = file.shared_name;
  }
  return std::make_unique<RocksDbSnapshot>(options_.instance_dir, local, range_, std::move(shared),
                                           std::move(prefixes), checkpoint_id, options_.local_recovery_dir);
}

void RocksDbKeyedState::FlushInBackground() {
  // A memtable still waiting for its flush: the next snapshot asks again
  // (asking now could stall writes until that flush is done).
  std::vector<rocksdb::ColumnFamilyHandle*> full;
  for (rocksdb::ColumnFamilyHandle* handle : impl_->handles) {
    uint64_t immutable = 0, entries = 0;
    if (!db_->GetIntProperty(handle, "rocksdb.num-immutable-mem-table", &immutable) || immutable > 0) continue;
    if (!db_->GetIntProperty(handle, "rocksdb.num-entries-active-mem-table", &entries) || entries == 0) continue;
    full.push_back(handle);
  }
  if (full.empty()) return;
  rocksdb::FlushOptions flush;
  flush.wait = false;              // the memtables switch here; RocksDB's threads write them
  flush.allow_write_stall = true;  // never wait on the task thread
  rocksdb::Status s = db_->Flush(flush, full);
  // Not fatal: the log keeps growing until a flush succeeds, and every
  // snapshot copies it whole.
  if (!s.ok()) Log()->warn("keyed state {}: requesting a memtable flush failed: {}", range_.DebugString(), s.ToString());
}

absl::Status RocksDbKeyedState::FlushNow() {
  return FromRocks(db_->Flush(rocksdb::FlushOptions(), impl_->handles), "flushing RocksDB's memtables");
}

void RocksDbKeyedState::FlushForTesting() {
  absl::Status flushed = FlushNow();
  if (!flushed.ok()) throw std::runtime_error(std::string(flushed.message()));
}

void RocksDbKeyedState::NotifyCheckpointComplete(int64_t checkpoint_id) {
  auto it = in_flight_.find(checkpoint_id);
  if (it != in_flight_.end()) confirmed_ = std::move(it->second);
  in_flight_.erase(in_flight_.begin(), in_flight_.upper_bound(checkpoint_id));
  // Local copies of older checkpoints will not be restored any more (a
  // restore takes the newest complete one).
  if (!options_.local_recovery_dir.empty()) {
    std::error_code ec;
    for (fs::directory_iterator it(options_.local_recovery_dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::optional<int64_t> id = CheckpointIdOf(it->path());
      if (id.has_value() && *id < checkpoint_id) RemoveTree(it->path().string());
    }
  }
}

void RocksDbKeyedState::NotifyCheckpointAborted(int64_t checkpoint_id) {
  // Only what it uploaded first is forgotten (that never becomes confirmed_):
  // the JobManager deletes those shared files once no complete checkpoint
  // refers to them, so the next snapshot uploads them again. confirmed_
  // stays: an abort discards only the aborted checkpoint's own directory, and
  // the live files of confirmed_ are referred to, by the same names, by the
  // newest complete checkpoint (the one confirmed_ is of, or a newer one
  // whose news this task missed: they were live at it too).
  in_flight_.erase(checkpoint_id);
  if (!options_.local_recovery_dir.empty()) {
    RemoveTree(CheckpointDirName(options_.local_recovery_dir, checkpoint_id));
  }
}

absl::Status RocksDbKeyedState::RestoreState(const std::vector<KeyedStateRestore>& parts) {
  std::vector<const KeyedStateRestore*> overlapping;
  for (const KeyedStateRestore& part : parts) {
    const v1::KeyedStateFilesProto& files = part.snapshot.keyed_files();
    if (files.backend().empty()) {
      if (part.snapshot.key_groups_size() == 0) continue;  // no keyed state there
      return absl::FailedPreconditionError(
          "the checkpoint holds this operator's keyed state from the 'hashmap' state backend, but the job now runs "
          "with 'rocksdb'; set state.backend.type back to 'hashmap' to restore it");
    }
    if (files.backend() != kBackendName) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint holds keyed state of an unknown backend '",
                                                        files.backend(), "'"));
    }
    if (files.key_group_end() <= range_.start || files.key_group_start() >= range_.end) continue;
    overlapping.push_back(&part);
  }
  if (overlapping.size() == 1 && overlapping[0]->snapshot.keyed_files().key_group_start() == range_.start &&
      overlapping[0]->snapshot.keyed_files().key_group_end() == range_.end) {
    return RestoreWhole(*overlapping[0]);
  }
  for (size_t i = 0; i < overlapping.size(); ++i) {
    RETURN_IF_ERROR(RestoreKeys(*overlapping[i], static_cast<int>(i)));
  }
  return absl::OkStatus();
}

namespace {

// Copies the files a snapshot lists into `target`, checking their sizes.
absl::Status CopySnapshotFiles(const KeyedStateRestore& part, const std::string& target) {
  const v1::KeyedStateFilesProto& files = part.snapshot.keyed_files();
  if (!IsPlainName(files.directory())) {
    return absl::DataLossError(absl::StrCat("the snapshot names the state directory '", files.directory(),
                                            "', which is not a plain name"));
  }
  const std::string source = absl::StrCat(part.checkpoint_dir, "/", files.directory());
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", target, ": ", ec.message()));
  for (const v1::StateFileProto& file : files.files()) {
    if (!IsPlainName(file.name()) || (!file.shared_name().empty() && !IsPlainName(file.shared_name()))) {
      return absl::DataLossError(absl::StrCat("the snapshot in ", source, " names the file '", file.name(), "' ('",
                                              file.shared_name(), "'), which is not a plain name"));
    }
    const std::string from =
        file.shared_name().empty()
            ? absl::StrCat(source, "/", file.name())
            : (fs::path(part.checkpoint_dir).parent_path() / "shared" / file.shared_name()).string();
    // Into the local instance: scratch space, not synced.
    absl::StatusOr<int64_t> size = io::CopyFile(from, absl::StrCat(target, "/", file.name()));
    if (!size.ok()) {
      return absl::DataLossError(absl::StrCat("keyed state file ", from, " cannot be read: ", size.status().message()));
    }
    if (*size != file.size_bytes()) {
      return absl::DataLossError(absl::StrCat("keyed state file ", from, " has ", *size,
                                              " bytes, the checkpoint recorded ", file.size_bytes()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RocksDbKeyedState::RestoreLocally(const KeyedStateRestore& part, int64_t* bytes) {
  const std::optional<int64_t> id = CheckpointIdOf(part.checkpoint_dir);
  if (!id.has_value()) return absl::NotFoundError(absl::StrCat("no checkpoint id in ", part.checkpoint_dir));
  const std::string kept = CheckpointDirName(options_.local_recovery_dir, *id);
  std::error_code ec;
  if (!fs::is_directory(kept, ec)) return absl::NotFoundError(absl::StrCat("no local copy of checkpoint ", *id));
  // The copy must list exactly what the checkpoint recorded.
  const v1::KeyedStateFilesProto& files = part.snapshot.keyed_files();
  *bytes = 0;
  for (const v1::StateFileProto& file : files.files()) {
    if (!IsPlainName(file.name())) return absl::DataLossError(absl::StrCat("bad file name '", file.name(), "'"));
    const auto size = fs::file_size(absl::StrCat(kept, "/", file.name()), ec);
    if (ec || static_cast<int64_t>(size) != file.size_bytes()) {
      return absl::DataLossError(absl::StrCat("the local copy's ", file.name(), " differs from the checkpoint's"));
    }
    *bytes += file.size_bytes();
  }
  CloseDb();
  const std::string path = absl::StrCat(options_.instance_dir, "/db");
  RemoveTree(path);
  fs::create_directories(path, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating ", path, ": ", ec.message()));
  for (const v1::StateFileProto& file : files.files()) {
    const std::string from = absl::StrCat(kept, "/", file.name()), to = absl::StrCat(path, "/", file.name());
    // Table files are immutable: linked. The rest (the log, MANIFEST,
    // CURRENT, OPTIONS) RocksDB may write to, so they are copied.
    if (absl::EndsWith(file.name(), ".sst")) {
      fs::create_hard_link(from, to, ec);
      if (ec) return absl::UnavailableError(absl::StrCat("linking ", from, ": ", ec.message()));
    } else {
      RETURN_IF_ERROR(io::CopyFile(from, to).status());
    }
  }
  RETURN_IF_ERROR(OpenDb());
  return FromRocks(db_->VerifyChecksum(), "verifying the local copy");
}

absl::Status RocksDbKeyedState::RestoreWhole(const KeyedStateRestore& part) {
  if (!options_.local_recovery_dir.empty()) {
    int64_t bytes = 0;
    absl::Status local = RestoreLocally(part, &bytes);
    if (local.ok()) {
      Log()->info("keyed state {} restored from its local copy in {} ({} bytes not read from {})",
                  range_.DebugString(), options_.local_recovery_dir, bytes, part.checkpoint_dir);
      return absl::OkStatus();
    }
    Log()->info("keyed state {}: no usable local copy ({}); reading {}", range_.DebugString(), local.message(),
                part.checkpoint_dir);
  }
  CloseDb();
  const std::string path = absl::StrCat(options_.instance_dir, "/db");
  RemoveTree(path);
  RETURN_IF_ERROR(CopySnapshotFiles(part, path));
  absl::Status opened = OpenDb();
  if (!opened.ok()) {
    return absl::DataLossError(absl::StrCat("the keyed state in ", part.checkpoint_dir, "/",
                                            part.snapshot.keyed_files().directory(),
                                            " does not open: ", opened.message()));
  }
  // Reads every block once: a damaged file fails the restore now, not later.
  absl::Status verified = FromRocks(db_->VerifyChecksum(), "verifying the restored keyed state");
  if (!verified.ok()) {
    return absl::DataLossError(absl::StrCat("the keyed state in ", part.checkpoint_dir, "/",
                                            part.snapshot.keyed_files().directory(), " is corrupt: ",
                                            verified.message()));
  }
  return absl::OkStatus();
}

absl::Status RocksDbKeyedState::RestoreKeys(const KeyedStateRestore& part, int index) {
  const std::string temp = absl::StrCat(options_.instance_dir, "/restore-", index);
  RemoveTree(temp);
  absl::Status status = CopySnapshotFiles(part, temp);
  if (!status.ok()) {
    RemoveTree(temp);
    return status;
  }
  std::vector<std::string> names;
  rocksdb::DB* source = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  status = FromRocks(rocksdb::DB::ListColumnFamilies(impl_->db_options, temp, &names), "listing column families");
  if (status.ok()) {
    std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
    for (const std::string& name : names) descriptors.emplace_back(name, impl_->family_options);
    status = FromRocks(rocksdb::DB::OpenForReadOnly(impl_->db_options, temp, descriptors, &handles, &source),
                       "opening");
  }
  for (size_t f = 0; status.ok() && f < handles.size(); ++f) {
    const std::string& name = handles[f]->GetName();
    if (!absl::StartsWith(name, kFamilyPrefix)) continue;
    rocksdb::ColumnFamilyHandle* target = FamilyByName(name.substr(sizeof(kFamilyPrefix) - 1));
    rocksdb::ReadOptions scan;
    scan.total_order_seek = true;  // every key, across prefixes
    std::unique_ptr<rocksdb::Iterator> it(source->NewIterator(scan, handles[f]));
    rocksdb::WriteBatch batch;
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      if (!range_.Contains(KeyGroupOf(it->key()))) continue;
      batch.Put(target, it->key(), it->value());
      if (batch.GetDataSize() > (4 << 20)) {
        status = FromRocks(db_->Write(impl_->write, &batch), "writing restored state");
        batch.Clear();
        if (!status.ok()) break;
      }
    }
    if (status.ok()) status = FromRocks(it->status(), "reading");
    if (status.ok()) status = FromRocks(db_->Write(impl_->write, &batch), "writing restored state");
  }
  if (source != nullptr) {
    for (rocksdb::ColumnFamilyHandle* handle : handles) source->DestroyColumnFamilyHandle(handle);
    delete source;
  }
  RemoveTree(temp);
  if (!status.ok()) {
    return absl::DataLossError(absl::StrCat("restoring keyed state from ", part.checkpoint_dir, "/",
                                            part.snapshot.keyed_files().directory(), ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace weir::taskmanager
