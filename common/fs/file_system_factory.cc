#include "common/fs/file_system_factory.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fs/local_file_system.h"
#include "common/status_macros.h"

namespace weir::fs {

absl::StatusOr<std::unique_ptr<FileSystem>> OpenFileSystem(absl::string_view uri, const config::Configuration* config,
                                                           const EnvLookup& env) {
  absl::string_view rest = uri;
  if (absl::StartsWith(uri, "/") || absl::ConsumePrefix(&rest, "file://")) {
    if (!absl::StartsWith(rest, "/")) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", uri, "' names no absolute path (file:///abs/path has three slashes)"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<LocalFileSystem> local, LocalFileSystem::Open(std::string(rest)));
    return std::unique_ptr<FileSystem>(std::move(local));
  }
  if (absl::StartsWith(uri, "s3://")) {
    ASSIGN_OR_RETURN(S3Options options, ResolveS3Options(config, env));
    ASSIGN_OR_RETURN(std::unique_ptr<S3FileSystem> s3, S3FileSystem::Open(uri, std::move(options)));
    return std::unique_ptr<FileSystem>(std::move(s3));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unsupported storage URI '", uri, "': use an absolute path (/data/weir), file:///data/weir or s3://bucket/prefix"));
}

}  // namespace weir::fs
