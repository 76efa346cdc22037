// ArtifactStore: job binaries in the cluster's storage
// (high-availability.storageDir: a directory, or s3://bucket/prefix), stored
// under their SHA-256 and never under a name a client chose:
// artifacts/sha256/<64 hex> below that root, read and written through a
// FileSystem (common/fs/), so that every JobManager of the cluster, a
// standby too, serves what any of them stored.
//
// An upload is staged in a local file while it is hashed and limited in size
// (per binary, and by the store's quota), then published with kCreateNew: a
// reader never sees a partial artifact, and an object already there under
// that name is checked (its size; its hash too when the storage is a local
// directory, where reading it is cheap) before it is taken for this upload,
// and replaced when it does not match. Downloads read the object in bounded
// ranges. Collect removes the artifacts no job uses once they went unused
// for a retention period.
//
// Staging: for a directory, beside the artifacts (.upload-<host>-<pid>-<n>,
// as always); for an object store, in a private local directory of the
// JobManager's. Open removes the staging files of processes of this host
// that no longer run.
//
// Errors never name a path, bucket or key of the store: they are sent to
// clients. The detail goes to the JobManager's log.
//
// Thread-safety: thread-safe; each Upload is used by one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/crypto/sha256.h"
#include "common/fs/file_system.h"

namespace weir::jobmanager {

class ArtifactStore {
 public:
  class Upload {
   public:
    ~Upload();  // removes the staging file
    // Fails with kResourceExhausted once the artifact exceeds the limit.
    absl::Status Append(absl::string_view data);
    // Hashes the staged file and publishes it; returns the SHA-256. With
    // `expected_sha256`, an upload that hashes otherwise is refused
    // (kDataLoss) and not stored.
    absl::StatusOr<std::string> Commit(absl::string_view expected_sha256 = {});
    int64_t size() const { return size_; }

   private:
    friend class ArtifactStore;
    Upload(ArtifactStore* store, std::string staging_path, std::FILE* file)
        : store_(store), staging_path_(std::move(staging_path)), file_(file) {}

    ArtifactStore* store_;
    std::string staging_path_;
    std::FILE* file_;
    crypto::Sha256 sha_;
    int64_t size_ = 0;
  };

  // The store at `root`: a local directory (made absolute; the staging
  // files go beside the artifacts) or s3://bucket/prefix (the staging files
  // go to `staging_dir`, a local directory created private). Removes the
  // staging files of this host's processes that are gone, and counts what
  // is stored. `max_bytes` bounds one binary, `quota_bytes` (0: none) all
  // of them together.
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(const std::string& root, int64_t max_bytes,
                                                             int64_t quota_bytes = 0,
                                                             const std::string& staging_dir = "");

  // A store in `fs` at `prefix` ("" for its root, else "a/b"), staging in
  // `staging_dir` (a local directory, created private).
  static absl::StatusOr<std::unique_ptr<ArtifactStore>> Open(std::shared_ptr<fs::FileSystem> fs, std::string prefix,
                                                             std::string staging_dir, int64_t max_bytes,
                                                             int64_t quota_bytes);

  absl::StatusOr<std::unique_ptr<Upload>> BeginUpload();

  // The size of an artifact; kInvalidArgument for anything but a SHA-256 in
  // hex, kNotFound when absent.
  absl::StatusOr<int64_t> SizeOf(absl::string_view sha256);

  // Up to `length` bytes of an artifact from `offset` (fewer at its end).
  absl::StatusOr<std::string> Read(absl::string_view sha256, int64_t offset, int64_t length);

  // The artifact's path in the FileSystem (for tests and logs).
  std::string ObjectPath(absl::string_view sha256) const;
  fs::FileSystem& file_system() { return *fs_; }

  int64_t max_bytes() const { return max_bytes_; }
  // Bytes of all stored artifacts (as of the last listing, and what this
  // process stored or removed since).
  int64_t stored_bytes() const { return stored_bytes_.load(); }

  struct Collected {
    int files = 0;
    int64_t bytes = 0;
  };
  // Removes every artifact whose SHA-256 is not in `in_use` and that this
  // store saw unused, and not stored again, at every Collect since
  // `retention` before `now` (the first Collect that finds one unused
  // starts its time: after a JobManager starts, an artifact lives at least
  // one retention more). Lists the store, which also refreshes
  // stored_bytes() with what other JobManagers stored.
  Collected Collect(const std::set<std::string>& in_use, absl::Duration retention, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  ArtifactStore(std::shared_ptr<fs::FileSystem> fs, std::string prefix, std::string staging_dir, int64_t max_bytes,
                int64_t quota_bytes)
      : fs_(std::move(fs)),
        prefix_(std::move(prefix)),
        staging_dir_(std::move(staging_dir)),
        max_bytes_(max_bytes),
        quota_bytes_(quota_bytes) {}

  // kResourceExhausted naming the quota.
  absl::Status OverQuota() const;
  // "artifacts/sha256/" below the prefix.
  std::string Directory() const;
  // Removes the staging files of this host's processes that are gone.
  void RemoveAbandonedStagingFiles();
  // Whether the object `path` holds `size` bytes hashing to `sha256` (the
  // hash only on a local directory); kNotFound when absent.
  absl::StatusOr<bool> Matches(const std::string& path, const std::string& sha256, int64_t size);
  // Publishes the staged file as the artifact `sha256` of `size` bytes.
  absl::Status Publish(const std::string& staging_path, const std::string& sha256, int64_t size)
      ABSL_LOCKS_EXCLUDED(mu_);

  const std::shared_ptr<fs::FileSystem> fs_;
  const std::string prefix_;
  const std::string staging_dir_;
  bool cheap_reads_ = false;  // a local directory: hashing an object is a local read
  int64_t max_bytes_;
  int64_t quota_bytes_;
  std::atomic<int64_t> stored_bytes_{0};
  // Bytes of the uploads not yet committed or abandoned.
  std::atomic<int64_t> in_flight_bytes_{0};

  // Orders a publication against Collect's removal of the same artifact.
  absl::Mutex mu_;
  // Artifacts being published now: Collect leaves them alone.
  std::multiset<std::string> publishing_ ABSL_GUARDED_BY(mu_);
  // When Collect first found each artifact unused (since its last storing).
  std::map<std::string, absl::Time> unused_since_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weir::jobmanager
