// The FileSystem for a URI: "/abs/path" and "file:///abs/path" open a
// LocalFileSystem, "s3://bucket/prefix" an S3FileSystem with the settings of
// ResolveS3Options. Anything else is refused, naming the forms accepted.
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>

#include "common/fs/file_system.h"
#include "common/fs/s3/s3_file_system.h"

namespace weir::fs {

// `config` may be null (S3 settings from the environment and files only).
absl::StatusOr<std::unique_ptr<FileSystem>> OpenFileSystem(absl::string_view uri, const config::Configuration* config,
                                                           const EnvLookup& env = ProcessEnvironment());

}  // namespace weir::fs
