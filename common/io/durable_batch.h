// DurableBatch: the files of one snapshot, made durable together.
//
// Syncing each file as it is written makes the disk do one thing at a time:
// write one file, commit the journal, flush the cache, then the next. A
// batch starts each file's write-back as soon as the file is written
// (sync_file_range) and fsyncs them all only in Sync(): by then most of the
// bytes are on their way or written, and the first fsync's journal commit
// carries the others' metadata too. Names given as final appear only in
// Sync(), once their bytes are durable (written under a temporary name,
// renamed), and the directories holding what the batch created or renamed
// are synced last. What Sync() returned OK for survives a crash; a failed
// or abandoned batch removes its temporary files (files written under
// their final name stay, as with a failed copy).
//
// At most kMaxOpenFiles descriptors stay open: past that, the oldest file
// is synced and closed early. Once such an early sync has failed, every
// call returns that error without writing more.
//
// Thread-safety: one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::io {

class DurableBatch {
 public:
  static constexpr size_t kMaxOpenFiles = 64;

  DurableBatch() = default;
  // `durable` false: a staging directory that is uploaded and removed (its
  // durability is the store's, remote_snapshot.h). Nothing is synced, and
  // Copy and CopyThenRename hard-link the source under the name rather than
  // copy it (a copy only where a link cannot be made, e.g. across file
  // systems): the sources are snapshot files of their own (RocksDB's
  // checkpoint links), and a link keeps the bytes even after their first
  // name is deleted (a compaction). A source still appended to (a limit)
  // is listed in linked_prefixes(): an upload reads it no further.
  explicit DurableBatch(bool durable) : durable_(durable) {}
  ~DurableBatch();

  DurableBatch(const DurableBatch&) = delete;
  DurableBatch& operator=(const DurableBatch&) = delete;

  // Copies `from` into `to` (created or truncated; durable at Sync). limit
  // as io::CopyFile. Returns the bytes copied.
  absl::StatusOr<int64_t> Copy(const std::string& from, const std::string& to, int64_t limit = -1);

  // Copies `from` into `temp`; Sync renames it to `final_path` once its bytes
  // are durable, so `final_path` is whole or absent.
  absl::StatusOr<int64_t> CopyThenRename(const std::string& from, const std::string& temp,
                                         const std::string& final_path);

  // Writes `contents` to `path` + ".tmp"; Sync renames it over `path`: a
  // reader sees the old file or the whole new one.
  absl::Status WriteAtomically(const std::string& path, absl::string_view contents);

  // Syncs `dir` with the directories at the end of Sync (one that the
  // caller created an entry in: a new subdirectory).
  void SyncDirectoryAtEnd(const std::string& dir);

  // Syncs every file, renames those with a final name, then syncs the
  // directories. The first error, naming the file; the batch is done
  // either way.
  absl::Status Sync();

  // fsync calls Sync made or will make (files and directories), for tests
  // and logs.
  int fsyncs() const { return fsyncs_; }

  // Staging only: files linked with a limit (their source is still
  // appended to), and the bytes of each that belong to the batch.
  const std::map<std::string, int64_t>& linked_prefixes() const { return linked_prefixes_; }

 private:
  struct File {
    int fd = -1;
    std::string path;   // as written
    std::string final;  // renamed to at Sync; empty: stays at `path`
  };

  // Keeps `file` open and starts its write-back; past kMaxOpenFiles,
  // finishes the oldest (a failure there is Sync's to return).
  void Keep(File file);
  // Staging: links `from` as `to`; nullopt where no link can be made there
  // (the caller copies instead). Returns the bytes the batch holds of it.
  absl::StatusOr<std::optional<int64_t>> Link(const std::string& from, const std::string& to, int64_t limit);
  // fsyncs and closes `file`; one with a final name waits in to_rename_.
  // On failure its temporary file is removed.
  absl::Status Finish(File& file);

  std::deque<File> open_;
  std::vector<File> to_rename_;  // synced and closed, renamed in Sync
  std::set<std::string> directories_;
  std::map<std::string, int64_t> linked_prefixes_;
  absl::Status early_;  // a failure while syncing a file early
  int fsyncs_ = 0;
  const bool durable_ = true;
};

}  // namespace weir::io
