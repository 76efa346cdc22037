// FileSystem: the durable store of a cluster (checkpoints, savepoints, the job
// store, job artifacts) behind one interface, so that the same callers work on
// a POSIX directory (local disk, NFS, a Kubernetes volume) and on an S3 bucket.
//
// Paths are relative to the root the FileSystem was opened on ("job-7f3a/
// chk-42/_metadata"): '/'-separated, no leading '/', no empty, "." or ".."
// segments. A directory is only a prefix of paths; there is nothing to create
// before writing under it, and List goes through every level below.
//
// What each caller needs (the next step moves them onto this interface):
//   jobmanager/job_store.cc                 Write (publish), ReadFile, List, Delete
//   jobmanager/checkpoint/checkpoint_storage.cc, savepoint.cc
//                                           Write(kCreateNew) for _metadata (a
//                                           checkpoint id is never written twice),
//                                           ReadFile, List, DeleteMany (garbage
//                                           collection by reference), Stat
//   taskmanager/checkpointing/snapshot_file.cc, snapshot_uploader.cc
//                                           NewWriter (streamed, published at
//                                           Close, discarded at Abort), UploadFile
//   taskmanager/state/ (incremental RocksDB) UploadFile(kCreateNew) of shared SST
//                                           files, Exists, DownloadFile, ReadRange
//   jobmanager/artifact_store.cc            (in use) UploadFile(kCreateNew) under
//                                           the content hash, Stat, ReadRange
//                                           (downloads), List + Delete (quota,
//                                           retention); TaskManagers get the
//                                           binaries over gRPC, not from here
//
// Publishing. A file written through this interface is never visible in part:
// a reader sees no file or the whole one. Local files are written to a
// temporary name, fsynced and renamed (or linked, for kCreateNew), and the
// directory fsynced; S3 objects appear whole when their PUT (or the
// multipart upload's completion) succeeds.
//
// Errors. absl::Status with codes by meaning: kNotFound (no such file),
// kAlreadyExists (kCreateNew and the file exists), kPermissionDenied
// (credentials or permissions), kFailedPrecondition (the store itself is
// wrong: a missing bucket), kUnavailable (transient; already retried by the
// implementation), kResourceExhausted (a file over the caller's size bound),
// kInvalidArgument (a bad path). Messages name the file (and for S3 the
// bucket, key, HTTP status and S3 error code).
//
// Thread-safety: a FileSystem is thread-safe; any thread may call any method,
// concurrently. A FileWriter belongs to one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::fs {

enum class WriteMode {
  kOverwrite,  // replace a file that exists (atomically)
  kCreateNew,  // kAlreadyExists if the file exists; never replaces it
};

struct FileInfo {
  std::string path;  // relative to the FileSystem's root
  int64_t size = 0;
};

// A file being written: bytes are appended, and the file appears whole at
// Close or not at all (Abort, a failed Close, or destruction before Close).
// Not thread-safe.
class FileWriter {
 public:
  virtual ~FileWriter() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  // Publishes the file. After a failure nothing is visible (for kCreateNew,
  // kAlreadyExists when the file appeared meanwhile).
  virtual absl::Status Close() = 0;
  // Discards what was written; nothing becomes visible. Safe after a failed
  // Append or Close.
  virtual absl::Status Abort() = 0;
  // Bytes appended so far.
  virtual int64_t bytes_written() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The URI this FileSystem was opened on ("/data/weir", "s3://bucket/prefix").
  virtual std::string Uri() const = 0;

  // Writes `contents` as the whole file `path` and publishes it.
  virtual absl::Status Write(absl::string_view path, absl::string_view contents, WriteMode mode) = 0;

  // A writer for a file too large to hold in memory at once.
  virtual absl::StatusOr<std::unique_ptr<FileWriter>> NewWriter(absl::string_view path, WriteMode mode) = 0;

  // Copies the local file `local_path` to `path` and publishes it. Returns its size.
  virtual absl::StatusOr<int64_t> UploadFile(const std::string& local_path, absl::string_view path,
                                             WriteMode mode);

  // The whole file; kResourceExhausted when it holds more than `max_bytes`
  // (a corrupt or hostile file must not exhaust memory).
  virtual absl::StatusOr<std::string> ReadFile(absl::string_view path, int64_t max_bytes) = 0;

  // `length` bytes from `offset` (fewer at the end of the file; none past it).
  virtual absl::StatusOr<std::string> ReadRange(absl::string_view path, int64_t offset, int64_t length) = 0;

  // Copies `path` to the local file `local_path` (created or truncated,
  // fsynced). Returns its size.
  virtual absl::StatusOr<int64_t> DownloadFile(absl::string_view path, const std::string& local_path);

  // The file's size; kNotFound when it does not exist.
  virtual absl::StatusOr<FileInfo> Stat(absl::string_view path) = 0;

  // Whether `path` exists (false rather than kNotFound).
  absl::StatusOr<bool> Exists(absl::string_view path);

  // Every file whose path starts with `prefix` (a directory is "dir/"), at
  // every depth, sorted by path. An empty prefix lists the whole FileSystem.
  virtual absl::StatusOr<std::vector<FileInfo>> List(absl::string_view prefix) = 0;

  // Deletes `path`; OK when it did not exist (deletes are retried, and a
  // retried delete must not fail because the first one worked).
  virtual absl::Status Delete(absl::string_view path) = 0;

  // Deletes every path in `paths` (S3: in batches of 1000). Goes on past a
  // failure and returns the first error, naming how many failed.
  virtual absl::Status DeleteMany(const std::vector<std::string>& paths);
};

// Checks a relative path (see the file comment); errors name it.
absl::Status ValidatePath(absl::string_view path);

}  // namespace weir::fs
