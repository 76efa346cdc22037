// Savepoints: a completed checkpoint copied out of a job's checkpoint
// directory into one of its own, so that it is self-contained (references
// nothing the job's checkpoint retention may delete) and outlives the job.
//
//   <state.savepoints.dir>/savepoint-<job id>-<random>/
//       _savepoint            "weir-savepoint <format version>\n"
//       chk-<n>/              the checkpoint's files and _metadata, copied
//
// A job submitted with -s <that directory> restores it like a checkpoint.
// -s also takes a retained checkpoint: <state.checkpoints.dir>/<job>/chk-<n>,
// or <state.checkpoints.dir>/<job> for its newest intact one (see
// execution.checkpointing.externalized-checkpoint-retention). Paths a client
// sends are used only inside state.savepoints.dir or state.checkpoints.dir.
//
// Either directory may be an object-store URI (s3://bucket/prefix): the same
// layout, copied through the FileSystems (common/fs), the _savepoint marker
// written last with a conditional create.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "jobmanager/checkpoint/checkpoint_storage.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::jobmanager::checkpoint {

inline constexpr int kSavepointFormatVersion = 1;

// `given` (relative to `root`, or absolute) as a path inside `root`;
// kInvalidArgument when it would leave it (.., another absolute path) or
// `root` is empty, naming `root_key` (the setting that sets the root).
absl::StatusOr<std::string> PathInside(const std::string& root, const std::string& given, const char* root_key);

// Whether anything is stored at `path` (a local path, or an object-store URI
// with files under it).
bool RestorePathExists(const std::string& path);

// Copies completed checkpoint `id` of `storage` into a new savepoint
// directory under `target` (created if needed) and returns its path.
absl::StatusOr<std::string> WriteSavepoint(const CheckpointStorage& storage, int64_t id, const std::string& target,
                                           const std::string& job_id);

struct Savepoint {
  std::string path;                // the savepoint directory
  CheckpointStorage storage;       // opened on it: its chk-<n>
  v1::CheckpointMetadata metadata;  // verified, files checked
};

// Reads and verifies the savepoint at `path`: kNotFound when it is not a
// savepoint, kFailedPrecondition for an unknown format version, kDataLoss
// when its metadata or files are damaged.
absl::StatusOr<Savepoint> ReadSavepoint(const std::string& path);

// What weir submit -s names: a savepoint, a retained checkpoint (chk-<n>), or
// a job's checkpoint directory (its newest intact checkpoint).
struct RestorePoint {
  std::string path;            // as given
  std::string checkpoint_dir;  // the chk-<n> directory holding its files
  v1::CheckpointMetadata metadata;  // verified, files checked
  bool is_savepoint = false;
  // Newer checkpoints of a job directory passed over ("checkpoint <n>: why").
  std::vector<std::string> skipped;
};

// Reads and verifies `path` as one of the three. kNotFound when it is none of
// them (or a job directory holds no complete checkpoint); otherwise the
// errors of ReadSavepoint and CheckpointStorage::ReadMetadata.
absl::StatusOr<RestorePoint> ReadRestorePoint(const std::string& path);

}  // namespace weir::jobmanager::checkpoint
