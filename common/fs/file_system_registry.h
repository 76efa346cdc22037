// The object-store FileSystems of a process, for callers that hold a
// location as a URI string ("s3://bucket/prefix/job-7f3a/chk-42"): the
// checkpoint and savepoint stores of the JobManager, the snapshot upload and
// restore of the TaskManager. One FileSystem per bucket, opened at first use
// with the settings ConfigureFileSystems was given (the s3.* keys, else the
// AWS environment and files) and kept for the life of the process, so that
// its connection pool is shared by every caller.
//
// Local paths do not come here: their callers keep their POSIX code.
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/fs/file_system.h"

namespace weir::config {
class Configuration;
}

namespace weir::fs {

// Whether `uri` names a location in an object store (s3://...), rather than
// a local path.
bool IsObjectStoreUri(absl::string_view uri);

// A location in an object store: the bucket's FileSystem and the path in it
// ("" for the bucket's root).
struct ObjectStorePath {
  std::shared_ptr<FileSystem> fs;
  std::string path;

  // `path` + "/" + `relative` (just `relative` at the root).
  std::string Child(absl::string_view relative) const;
};

// The S3 settings every later OpenObjectStorePath uses (a daemon calls it
// once at start with its configuration; without a call, the environment and
// files alone). Forgets the FileSystems opened with earlier settings. An
// error in the settings is kept and returned by every OpenObjectStorePath,
// naming the key.
void ConfigureFileSystems(const config::Configuration& config);

// The FileSystem of `uri`'s bucket and the path below it. kInvalidArgument
// for a URI that is not s3://bucket[/path] or has a bad path.
absl::StatusOr<ObjectStorePath> OpenObjectStorePath(absl::string_view uri);

// Checks that the bucket of `uri` exists and the credentials may list it
// (one ListObjectsV2 below the path): the error names `key` (the setting the
// URI came from), the bucket and the HTTP status.
absl::Status ProbeObjectStore(absl::string_view uri, absl::string_view key);

}  // namespace weir::fs
