// ArtifactStore: job binaries in the cluster's shared directory
// (high-availability.storageDir), stored under their SHA-256 and never under
// a name a client chose: <dir>/artifacts/sha256/<64 hex>.
//
// An upload streams into a temporary file while hashing, is limited in size
// (per binary, and by the store's quota), and lands by fsync + rename, so a
// reader never sees a partial artifact. Collect removes the artifacts no job
// uses once they are older than a retention period.
//
// Errors never name a path of the store: they are sent to clients.
//
// Thread-safety: thread-safe; each Upload is used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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
  // files of uploads a previous JobManager did not finish. `max_bytes`
  // bounds one binary, `quota_bytes` (0: none) all of them together.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(const std::string& root, int64_t max_bytes,
                                                             int64_t quota_bytes = 0);

  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload();

  // The path of an artifact; kInvalidArgument for anything but a SHA-256 in
  // hex, kNotFound when absent.
  absl::StatusOr<std::string> PathOf(absl::string_view sha256) const;

  int64_t max_bytes() const { return max_bytes_; }
  // Bytes of all stored artifacts.
  int64_t stored_bytes() const { return stored_bytes_.load(); }

  struct Collected {
    int files = 0;
    int64_t bytes = 0;
  };
  // Removes every artifact whose SHA-256 is not in `in_use` and that was
  // stored (or stored again) longer than `retention` before `now`.
  Collected Collect(const std::set<std::string>& in_use, absl::Duration retention, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // kResourceExhausted naming the quota.
  absl::Status OverQuota() const;
  ArtifactStore(std::string dir, int64_t max_bytes, int64_t quota_bytes)
      : dir_(std::move(dir)), max_bytes_(max_bytes), quota_bytes_(quota_bytes) {}
  std::string dir_;
  int64_t max_bytes_;
  int64_t quota_bytes_;
  std::atomic<int64_t> stored_bytes_{0};
  // Bytes of the uploads not yet committed or abandoned.
  std::atomic<int64_t> in_flight_bytes_{0};
  // Orders a commit's rename against Collect's removal of the same name.
  absl::Mutex mu_;
};

}  // namespace weir::jobmanager
