// ArtifactStore: job binaries in the cluster's shared directory
// (high-availability.storageDir), stored under their SHA-256 and never under
// a name a client chose: <dir>/artifacts/sha256/<64 hex>.
//
// An upload streams into a temporary file while hashing, is limited in size,
// and lands by fsync + rename, so a reader never sees a partial artifact.
//
// Errors never name a path of the store: they are sent to clients.
//
// Thread-safety: thread-safe; each Upload is used by one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/crypto/sha256.h"

namespace weir::jobmanager {

class ArtifactStore {
 public:
  class Upload {
   public:
    ~Upload();  // removes the temporary file unless committed
    // Fails with kResourceExhausted once the artifact exceeds the limit.
    absl::Status Append(absl::string_view data);
    // Hashes, syncs and moves the file into place; returns the SHA-256.
    // With `expected_sha256`, an upload that hashes otherwise is refused
    // (kDataLoss) and not stored.
    absl::StatusOr<std::string> Commit(absl::string_view expected_sha256 = {});
    int64_t size() const { return size_; }

   private:
    friend class ArtifactStore;
    Upload(ArtifactStore* store, std::string temp_path, std::FILE* file)
        : store_(store), temp_path_(std::move(temp_path)), file_(file) {}

    ArtifactStore* store_;
    std::string temp_path_;
    std::FILE* file_;
    crypto::Sha256 sha_;
    int64_t size_ = 0;
    bool committed_ = false;
  };

  // Creates <root>/artifacts/sha256 if needed, and removes the temporary
  // files of uploads a previous JobManager did not finish.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(const std::string& root, int64_t max_bytes);

  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload();

  // The path of an artifact; kInvalidArgument for anything but a SHA-256 in
  // hex, kNotFound when absent.
  absl::StatusOr<std::string> PathOf(absl::string_view sha256) const;

  int64_t max_bytes() const { return max_bytes_; }

 private:
  ArtifactStore(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}
  std::string dir_;
  int64_t max_bytes_;
};

}  // namespace weir::jobmanager
