// LocalFileSystem: a FileSystem on a POSIX directory (local disk, NFS, a
// Kubernetes volume) shared by every process of a cluster; what Weir has
// always used. Files are published by writing a hidden temporary file beside
// the target, fsyncing it, renaming it over the target (kOverwrite) or
// linking it to the target, which fails when the target exists (kCreateNew),
// and fsyncing the directory. Temporary files left by a crash are hidden
// from List (".<name>.weir-tmp-<random>").
//
// Thread-safety: thread-safe (no state besides the root).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/fs/file_system.h"

namespace weir::fs {

class LocalFileSystem final : public FileSystem {
 public:
  // `root` is an absolute directory; it is created at the first write.
  static absl::StatusOr<std::unique_ptr<LocalFileSystem>> Open(const std::string& root);

  std::string Uri() const override { return root_; }
  absl::Status Write(absl::string_view path, absl::string_view contents, WriteMode mode) override;
  absl::StatusOr<std::unique_ptr<FileWriter>> NewWriter(absl::string_view path, WriteMode mode) override;
  absl::StatusOr<int64_t> UploadFile(const std::string& local_path, absl::string_view path, WriteMode mode) override;
  absl::StatusOr<std::string> ReadFile(absl::string_view path, int64_t max_bytes) override;
  absl::StatusOr<std::string> ReadRange(absl::string_view path, int64_t offset, int64_t length) override;
  absl::StatusOr<int64_t> DownloadFile(absl::string_view path, const std::string& local_path) override;
  absl::StatusOr<FileInfo> Stat(absl::string_view path) override;
  absl::StatusOr<std::vector<FileInfo>> List(absl::string_view prefix) override;
  absl::Status Delete(absl::string_view path) override;

  // The local path of `path` (for callers that hand files to RocksDB).
  absl::StatusOr<std::string> LocalPath(absl::string_view path) const;

 private:
  explicit LocalFileSystem(std::string root) : root_(std::move(root)) {}

  std::string root_;
};

}  // namespace weir::fs
