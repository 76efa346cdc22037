#include "jobmanager/artifact_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"

namespace weir::jobmanager {
namespace {

std::string Errno() { return std::strerror(errno); }

// Errors from here reach clients, who must not learn the JobManager's storage
// paths: the detail goes to the JobManager's log, the client gets a summary.
absl::Status StorageError(absl::string_view what, absl::string_view detail) {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("artifacts");
  log->error("artifact store: {}: {}", what, detail);
  return absl::InternalError(
      absl::StrCat("the JobManager could not store the job binary (", what,
                   "); its log says why"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(const std::string& root, int64_t max_bytes,
                                                                   int64_t quota_bytes) {
  std::string dir = absl::StrCat(root, "/artifacts/sha256");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the artifact directory ", dir, ": ", ec.message(),
                     "; check high-availability.storageDir"));
  }
  // No upload is in progress before this JobManager serves: any temporary
  // file is a crashed one's.
  int64_t stored = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".upload-", 0) == 0) {
      std::filesystem::remove(entry.path(), ec);
    } else if (crypto::IsSha256Hex(name)) {
      const auto size = std::filesystem::file_size(entry.path(), ec);
      if (!ec) stored += static_cast<int64_t>(size);
    }
  }
  std::unique_ptr<ArtifactStore> store(new ArtifactStore(dir, max_bytes, quota_bytes));
  store->stored_bytes_ = stored;
  return store;
}

absl::Status ArtifactStore::OverQuota() const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the JobManager's job binaries would take more than their quota of ", quota_bytes_,
      " bytes (jobmanager.artifact.store.max-size) with this one; binaries no job uses go after "
      "jobmanager.artifact.retention: cancel jobs you no longer need, or raise the quota"));
}

ArtifactStore::Collected ArtifactStore::Collect(const std::set<std::string>& in_use, absl::Duration retention,
                                                absl::Time now) {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("artifacts");
  Collected collected;
  std::error_code ec;
  const auto cutoff = std::filesystem::file_time_type::clock::now() -
                      std::chrono::duration_cast<std::filesystem::file_time_type::duration>(
                          absl::ToChronoNanoseconds(retention + (absl::Now() - now)));
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!crypto::IsSha256Hex(name) || in_use.contains(name)) continue;
    absl::MutexLock lock(&mu_);
    std::error_code time_error, size_error, remove_error;
    const auto modified = std::filesystem::last_write_time(entry.path(), time_error);
    const auto size = std::filesystem::file_size(entry.path(), size_error);
    if (time_error || size_error || modified > cutoff) continue;
    if (std::filesystem::remove(entry.path(), remove_error)) {
      ++collected.files;
      collected.bytes += static_cast<int64_t>(size);
      stored_bytes_ -= static_cast<int64_t>(size);
      log->info("artifact {} removed: no job uses it, and it was stored more than {} ago "
                "(jobmanager.artifact.retention)",
                name, absl::FormatDuration(retention));
    }
  }
  return collected;
}

absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> ArtifactStore::BeginUpload() {
  static std::atomic<int64_t> counter{0};
  std::string temp = absl::StrCat(dir_, "/.upload-", getpid(), "-", counter++);
  std::FILE* f = std::fopen(temp.c_str(), "wbx");
  if (f == nullptr) return StorageError("creating a temporary file", absl::StrCat(temp, ": ", Errno()));
  return std::unique_ptr<Upload>(new Upload(this, temp, f));
}

ArtifactStore::Upload::~Upload() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
  store_->in_flight_bytes_ -= size_;
}

absl::Status ArtifactStore::Upload::Append(absl::string_view data) {
  if (size_ + static_cast<int64_t>(data.size()) > store_->max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("the job binary is larger than the limit of ",
                                                     store_->max_bytes_, " bytes (jobmanager.artifact.max-size)"));
  }
  // The stored binaries are checked at Commit (this one may replace one of
  // them); here the uploads in flight, which together may hold the quota.
  const auto n = static_cast<int64_t>(data.size());
  const int64_t in_flight = store_->in_flight_bytes_.fetch_add(n) + n;
  if (store_->quota_bytes_ > 0 && in_flight > store_->quota_bytes_) {
    store_->in_flight_bytes_ -= n;
    return store_->OverQuota();
  }
  if (std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    store_->in_flight_bytes_ -= n;
    return StorageError("writing", absl::StrCat(temp_path_, ": ", Errno()));
  }
  sha_.Update(data);
  size_ += n;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ArtifactStore::Upload::Commit(absl::string_view expected_sha256) {
  if (size_ == 0) return absl::InvalidArgumentError("the uploaded job binary is empty");
  if (!expected_sha256.empty() && sha_.HexDigest() != expected_sha256) {
    return absl::DataLossError(absl::StrCat("the uploaded job binary hashes to ", sha_.HexDigest(), ", not to the ",
                                            expected_sha256, " the client announced; it is not stored"));
  }
  if (std::fflush(file_) != 0 || fsync(fileno(file_)) != 0) {
    return StorageError("syncing", absl::StrCat(temp_path_, ": ", Errno()));
  }
  std::fclose(file_);
  file_ = nullptr;
  std::string sha = sha_.HexDigest();
  std::string final_path = absl::StrCat(store_->dir_, "/", sha);
  {
    absl::MutexLock lock(&store_->mu_);
    std::error_code ec;
    const auto replaced = std::filesystem::file_size(final_path, ec);
    const int64_t growth = size_ - (ec ? 0 : static_cast<int64_t>(replaced));
    if (store_->quota_bytes_ > 0 && store_->stored_bytes_.load() + growth > store_->quota_bytes_) {
      return store_->OverQuota();
    }
    if (std::rename(temp_path_.c_str(), final_path.c_str()) != 0) {
      return StorageError("moving into place", absl::StrCat(temp_path_, " to ", final_path, ": ", Errno()));
    }
    store_->stored_bytes_ += growth;
  }
  committed_ = true;
  // Make the rename durable.
  int dir_fd = open(store_->dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    fsync(dir_fd);
    close(dir_fd);
  }
  return sha;
}

absl::StatusOr<std::string> ArtifactStore::PathOf(absl::string_view sha256) const {
  if (!crypto::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("'", sha256, "' is not an artifact id (64 lowercase hex)"));
  }
  std::string path = absl::StrCat(dir_, "/", sha256);
  if (access(path.c_str(), R_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("the JobManager has no job binary ", sha256, "; upload it first (weir submit does)"));
  }
  return path;
}

}  // namespace weir::jobmanager
