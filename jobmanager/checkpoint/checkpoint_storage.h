// CheckpointStorage: the directory that holds one job's checkpoints in the
// shared backend, <state.checkpoints.dir>/<job id>, and the _metadata file
// that makes a checkpoint complete.
//
// Checkpoint n lives in <job dir>/chk-<n>/. The tasks write their snapshot
// files there; the coordinator writes only <job dir>/chk-<n>/_metadata, and
// only after every task acknowledged. A checkpoint is complete iff its
// _metadata exists and reads back valid (ReadMetadata).
//
// _metadata format, version 1 (all integers little-endian):
//   8 bytes   magic "WEIRCKPT"
//   4 bytes   format version (1)
//   8 bytes   payload length L
//   L bytes   v1::CheckpointMetadata, serialized
//   64 bytes  SHA-256 of the payload as lowercase hex (common/crypto/sha256.h
//             only produces hex, so the trailer is the 64 hex characters
//             rather than the 32 raw bytes)
//
// The job directory is a local path or an object-store URI
// (s3://bucket/prefix/<job>, common/fs/file_system_registry.h). In an object
// store there are no directories: chk-<n> exists when a file under it does,
// _metadata is created with a conditional create (a second create of one
// checkpoint id fails), and the shared files are collected by reference and
// checkpoint id (CollectSharedGarbage), never by modification time.
//
// Paths are built only from the job directory given to Open and integer ids
// formatted here; a task file name from an acknowledgement is used only
// after ValidateTaskFileName accepted it.
//
// Thread-safety: a CheckpointStorage is immutable after Open, and its
// methods may be called from any thread. Calls that touch the same
// checkpoint id concurrently (e.g. WriteMetadata and Discard of one id) are
// the caller's to serialize; the CheckpointCoordinator does all its writes
// from its own thread.
#pragma once

#include "absl/time/time.h"
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/fs/file_system_registry.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::jobmanager::checkpoint {

// The version of the _metadata format this Weir writes and reads.
inline constexpr uint32_t kMetadataFormatVersion = 1;

// Accepts the name of a task's snapshot file as the tasks write it: a plain
// file name in the checkpoint directory (no '/', not starting with '.' or
// '_', which is reserved for the coordinator's own files, at most 255
// bytes). kInvalidArgument saying what is wrong otherwise.
absl::Status ValidateTaskFileName(absl::string_view file);

// The id of a directory named exactly as CheckpointDir formats it
// ("chk-<n>", no leading zeros), else nullopt.
std::optional<int64_t> ParseCheckpointDirName(absl::string_view name);

class CheckpointStorage {
 public:
  // Opens (creating it and its parents if needed) the checkpoint directory
  // of one job. kFailedPrecondition naming the path when it cannot be created.
  // In an object store, lists under it once: a missing bucket or refused
  // credentials fail here, naming the bucket and the HTTP status.
  static absl::StatusOr<CheckpointStorage> Open(std::string job_dir);

  // Opens a job directory that must exist (reading a retained checkpoint);
  // kNotFound otherwise. Creates nothing.
  static absl::StatusOr<CheckpointStorage> OpenExisting(std::string job_dir);

  const std::string& job_dir() const { return job_dir_; }

  // <job dir>/chk-<id>.
  std::string CheckpointDir(int64_t id) const;

  // Creates chk-<id> (before the checkpoint is triggered, so that the tasks
  // can write into it) and syncs the job directory. kAlreadyExists if it
  // exists: checkpoint ids are never reused. Ids are >= 1. In an object
  // store: kAlreadyExists when chk-<id>/_metadata exists; nothing to create.
  absl::Status CreateCheckpointDir(int64_t id);

  // Writes chk-<metadata.checkpoint_id()>/_metadata atomically and durably:
  // _metadata.tmp, fsync, rename, fsync of the directory. When this returns
  // OK the checkpoint is complete; on error it is not (a _metadata.tmp may be
  // left behind, which readers ignore). In an object store: one conditional
  // create; kAlreadyExists when another _metadata of that id exists.
  absl::Status WriteMetadata(const v1::CheckpointMetadata& metadata);

  // The metadata of checkpoint `id`. kNotFound when it has no _metadata (it
  // never completed); kDataLoss with the precise reason when the file is
  // unusable (bad magic, unknown format version, truncated, checksum
  // mismatch, unparsable payload, or the metadata of another checkpoint);
  // kUnavailable when it cannot be read (I/O error, permissions).
  absl::StatusOr<v1::CheckpointMetadata> ReadMetadata(int64_t id) const;

  // Whether chk-<id>/_metadata exists (without reading it). A stat error
  // other than "does not exist" is returned, so that callers deciding what
  // to delete can keep what they cannot see.
  absl::StatusOr<bool> HasMetadata(int64_t id) const;

  // Checks that every task file `metadata` lists exists in the checkpoint's
  // directory as a regular file of the recorded size, and every shared file
  // it refers to in the shared directory (kDataLoss naming the file
  // otherwise). The SHA-256 is checked by the task at restore.
  absl::Status VerifyTaskFiles(const v1::CheckpointMetadata& metadata) const;

  // <job dir>/shared: the files of incremental checkpoints, which several
  // checkpoints may refer to.
  std::string SharedDir() const;

  // Deletes every file of the shared directory that no complete checkpoint
  // on disk refers to and that was last modified before `older_than` (so
  // that the uploads of checkpoints still in progress stay). Does nothing
  // when a checkpoint's metadata cannot be read (what it refers to is
  // unknown). Returns how many files it deleted.
  // In an object store the modification time is not used: a shared file is
  // deleted when no complete checkpoint refers to it and the checkpoint that
  // uploaded it (its name starts "c<id>-", SharedFilePrefix) is older than
  // `below_checkpoint_id`, the oldest checkpoint that may still be uploading.
  // A name without an id is kept.
  absl::StatusOr<int> CollectSharedGarbage(absl::Time older_than,
                                           int64_t below_checkpoint_id = INT64_MAX) const;

  // Ids of every chk-<n> directory, complete or not, ascending. Anything
  // else in the job directory is ignored, as is a name that is not exactly
  // how this class formats an id ("chk-007"). A listing error is logged and
  // yields what could be listed.
  std::vector<int64_t> ListCheckpointIds() const;

  // The newest checkpoint whose metadata reads and whose task files verify,
  // or nullopt when there is none. For every newer checkpoint passed over, a
  // line "checkpoint <n>: <reason>" is appended to *skipped (may be null).
  // Only incomplete (kNotFound) and corrupt (kDataLoss) checkpoints are
  // passed over; any other error (the storage cannot be read) is returned,
  // so that a transient fault never silently selects an older checkpoint.
  absl::StatusOr<std::optional<v1::CheckpointMetadata>> LatestValid(std::vector<std::string>* skipped) const;

  // Removes chk-<id> and everything in it. OK if it does not exist.
  absl::Status Discard(int64_t id);

  // Removes the job directory and everything in it (the job's checkpoints
  // when it ends and its retention says so). OK if it does not exist.
  absl::Status DiscardAll() const;

  // Whether the job directory is in an object store.
  bool remote() const { return remote_.fs != nullptr; }

 private:
  explicit CheckpointStorage(std::string job_dir) : job_dir_(std::move(job_dir)) {}
  CheckpointStorage(std::string job_dir, fs::ObjectStorePath remote)
      : job_dir_(std::move(job_dir)), remote_(std::move(remote)) {}

  // The object-store forms of the methods above.
  absl::Status VerifyRemoteTaskFiles(const v1::CheckpointMetadata& metadata) const;
  absl::StatusOr<int> CollectRemoteSharedGarbage(int64_t below_checkpoint_id) const;
  absl::StatusOr<std::vector<int64_t>> ListRemoteIds() const;
  // chk-<id>/<name> (or <name> alone when empty) relative to the bucket.
  std::string RemoteCheckpointPath(int64_t id, absl::string_view name) const;

  absl::StatusOr<std::vector<int64_t>> ListIds() const;
  std::string MetadataPath(int64_t id) const;

  std::string job_dir_;
  fs::ObjectStorePath remote_;  // fs null: a local directory
};

// "c<id>-": how the name of a shared file an incremental snapshot of
// checkpoint `id` uploaded starts.
std::string SharedFilePrefix(int64_t id);
// The id in a shared file's name, or nullopt when it carries none.
std::optional<int64_t> SharedFileCheckpointId(absl::string_view name);

}  // namespace weir::jobmanager::checkpoint
