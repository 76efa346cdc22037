#include "common/fs/file_system_registry.h"

#include <map>
#include <optional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "common/fs/s3/s3_file_system.h"
#include "common/status_macros.h"

namespace weir::fs {
namespace {

constexpr absl::string_view kS3Scheme = "s3://";

// The settings and the open FileSystems, one per bucket.
class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();
    return *registry;
  }

  void Configure(absl::StatusOr<S3Options> options) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    options_ = std::move(options);
    buckets_.clear();  // opened with the old settings
  }

  absl::StatusOr<std::shared_ptr<FileSystem>> Bucket(const std::string& bucket) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    auto it = buckets_.find(bucket);
    if (it != buckets_.end()) return it->second;
    if (!options_.has_value()) options_ = ResolveS3Options(nullptr, ProcessEnvironment());
    if (!options_->ok()) return options_->status();
    ASSIGN_OR_RETURN(std::unique_ptr<S3FileSystem> opened,
                     S3FileSystem::Open(absl::StrCat(kS3Scheme, bucket), **options_));
    std::shared_ptr<FileSystem> shared(std::move(opened));
    buckets_.emplace(bucket, shared);
    return shared;
  }

 private:
  absl::Mutex mu_;
  std::optional<absl::StatusOr<S3Options>> options_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<FileSystem>> buckets_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

bool IsObjectStoreUri(absl::string_view uri) { return absl::StartsWith(uri, kS3Scheme); }

std::string ObjectStorePath::Child(absl::string_view relative) const {
  if (path.empty()) return std::string(relative);
  return absl::StrCat(path, "/", relative);
}

void ConfigureFileSystems(const config::Configuration& config) {
  Registry::Get().Configure(ResolveS3Options(&config, ProcessEnvironment()));
}

absl::StatusOr<ObjectStorePath> OpenObjectStorePath(absl::string_view uri) {
  absl::string_view rest = uri;
  if (!absl::ConsumePrefix(&rest, kS3Scheme)) {
    return absl::InvalidArgumentError(absl::StrCat("'", uri, "' is not an s3://bucket/path URI"));
  }
  const size_t slash = rest.find('/');
  const std::string bucket(rest.substr(0, slash));
  std::string path(slash == absl::string_view::npos ? "" : rest.substr(slash + 1));
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (!path.empty()) RETURN_IF_ERROR(Annotate(ValidatePath(path), absl::StrCat("the path of ", uri)));
  ASSIGN_OR_RETURN(std::shared_ptr<FileSystem> fs, Registry::Get().Bucket(bucket));
  return ObjectStorePath{std::move(fs), std::move(path)};
}

absl::Status ProbeObjectStore(absl::string_view uri, absl::string_view key) {
  absl::StatusOr<ObjectStorePath> where = OpenObjectStorePath(uri);
  absl::Status status = where.status();
  // A listing, not a HEAD: S3 says NoSuchBucket only when there is a body to
  // say it in. Under a name nothing is written to, so that it stays short.
  if (status.ok()) status = where->fs->List(where->Child("_probe/")).status();
  if (status.ok()) return status;
  return Annotate(status, absl::StrCat(key, " = ", uri, " cannot be used"));
}

}  // namespace weir::fs
