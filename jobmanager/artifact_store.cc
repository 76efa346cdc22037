#include "jobmanager/artifact_store.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/local_file_system.h"
#include "common/io/private_directory.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"

namespace weir::jobmanager {
namespace {

constexpr absl::string_view kStagingPrefix = ".upload-";
// What a download or a hash reads of an object at once.
constexpr int64_t kReadChunk = 1 << 20;

const std::shared_ptr<spdlog::logger>& Log() {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("artifacts");
  return log;
}

std::string Errno() { return std::strerror(errno); }

// Errors from here reach clients, who must not learn the JobManager's storage
// paths: the detail goes to the JobManager's log, the client gets a summary.
absl::Status StorageError(absl::string_view what, absl::string_view detail) {
  Log()->error("artifact store: {}: {}", what, detail);
  return absl::InternalError(
      absl::StrCat("the JobManager could not ", what, " (job binaries); its log says why"));
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

// .upload-<host>-<pid>-<n>: whether the process that wrote it ran on this
// host and is gone. Hosts may hold '-': the pid and counter are the last two.
bool AbandonedHere(absl::string_view name, const std::string& host) {
  if (!absl::ConsumePrefix(&name, kStagingPrefix)) return false;
  const size_t counter_dash = name.rfind('-');
  if (counter_dash == absl::string_view::npos) return false;
  const size_t pid_dash = name.substr(0, counter_dash).rfind('-');
  if (pid_dash == absl::string_view::npos || name.substr(0, pid_dash) != host) return false;
  int pid = 0;
  if (!absl::SimpleAtoi(name.substr(pid_dash + 1, counter_dash - pid_dash - 1), &pid) || pid <= 0) return false;
  return pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(const std::string& root, int64_t max_bytes,
                                                                   int64_t quota_bytes,
                                                                   const std::string& staging_dir) {
  if (fs::IsObjectStoreUri(root)) {
    if (staging_dir.empty()) {
      return absl::InvalidArgumentError("an artifact store in an object store needs a local staging directory");
    }
    absl::StatusOr<fs::ObjectStorePath> where = fs::OpenObjectStorePath(root);
    if (!where.ok()) return Annotate(where.status(), "high-availability.storageDir");
    return Open(std::move(where->fs), std::move(where->path), staging_dir, max_bytes, quota_bytes);
  }
  std::error_code ec;
  const std::string absolute = std::filesystem::absolute(root, ec).lexically_normal().string();
  if (ec) return absl::FailedPreconditionError(absl::StrCat("high-availability.storageDir ", root, ": ", ec.message()));
  const std::string dir = absl::StrCat(absolute, "/artifacts/sha256");
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create the artifact directory ", dir, ": ",
                                                      ec.message(), "; check high-availability.storageDir"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<fs::LocalFileSystem> local, fs::LocalFileSystem::Open(absolute));
  return Open(std::shared_ptr<fs::FileSystem>(std::move(local)), "", dir, max_bytes, quota_bytes);
}

absl::StatusOr<std::unique_ptr<ArtifactStore>> ArtifactStore::Open(std::shared_ptr<fs::FileSystem> fs,
                                                                   std::string prefix, std::string staging_dir,
                                                                   int64_t max_bytes, int64_t quota_bytes) {
  const bool local = dynamic_cast<fs::LocalFileSystem*>(fs.get()) != nullptr;
  // A staging directory of its own (not the artifacts' directory of a
  // local store) holds what clients sent: private, as a TaskManager's.
  const bool beside_artifacts =
      local && staging_dir == absl::StrCat(fs->Uri(), "/", prefix, prefix.empty() ? "" : "/", "artifacts/sha256");
  if (!beside_artifacts) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(staging_dir).parent_path(), ec);
    RETURN_IF_ERROR(Annotate(io::EnsurePrivateDirectory(staging_dir, "io.tmp.dirs"),
                             "the JobManager's staging directory of job binaries"));
  }
  std::unique_ptr<ArtifactStore> store(
      new ArtifactStore(std::move(fs), std::move(prefix), std::move(staging_dir), max_bytes, quota_bytes));
  store->cheap_reads_ = local;
  store->RemoveAbandonedStagingFiles();
  // What is stored: the quota counts it.
  absl::StatusOr<std::vector<fs::FileInfo>> listed = store->fs_->List(store->Directory());
  if (!listed.ok()) {
    return Annotate(listed.status(), absl::StrCat("listing the job binaries in high-availability.storageDir ",
                                                  store->fs_->Uri()));
  }
  int64_t stored = 0;
  for (const fs::FileInfo& file : *listed) {
    if (crypto::IsSha256Hex(absl::string_view(file.path).substr(store->Directory().size()))) stored += file.size;
  }
  store->stored_bytes_ = stored;
  Log()->info("artifact store in {}{}{}: {} job binaries' bytes stored, staging in {}", store->fs_->Uri(),
              store->prefix_.empty() ? "" : "/", store->prefix_, stored, store->staging_dir_);
  return store;
}

std::string ArtifactStore::Directory() const {
  return prefix_.empty() ? std::string("artifacts/sha256/") : absl::StrCat(prefix_, "/artifacts/sha256/");
}

std::string ArtifactStore::ObjectPath(absl::string_view sha256) const { return absl::StrCat(Directory(), sha256); }

void ArtifactStore::RemoveAbandonedStagingFiles() {
  const std::string host = HostName();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(staging_dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (!AbandonedHere(name, host)) continue;
    std::error_code remove_error;
    if (std::filesystem::remove(entry.path(), remove_error)) {
      Log()->info("artifact store: removed {}, an upload its JobManager (gone) did not finish", name);
    }
  }
}

absl::Status ArtifactStore::OverQuota() const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "the JobManager's job binaries would take more than their quota of ", quota_bytes_,
      " bytes (jobmanager.artifact.store.max-size) with this one; binaries no job uses go after "
      "jobmanager.artifact.retention: cancel jobs you no longer need, or raise the quota"));
}

ArtifactStore::Collected ArtifactStore::Collect(const std::set<std::string>& in_use, absl::Duration retention,
                                                absl::Time now) {
  Collected collected;
  absl::StatusOr<std::vector<fs::FileInfo>> listed = fs_->List(Directory());
  if (!listed.ok()) {
    Log()->warn("artifact store: cannot list the job binaries to collect unused ones: {}", listed.status().ToString());
    return collected;
  }
  int64_t stored = 0;
  std::set<std::string> present;
  for (const fs::FileInfo& file : *listed) {
    const std::string name = file.path.substr(Directory().size());
    if (!crypto::IsSha256Hex(name)) continue;
    present.insert(name);
    stored += file.size;
    if (in_use.contains(name)) {
      absl::MutexLock lock(&mu_);
      unused_since_.erase(name);
      continue;
    }
    absl::MutexLock lock(&mu_);
    if (publishing_.contains(name)) continue;
    auto [since, first] = unused_since_.emplace(name, now);
    if (first || now - since->second < retention) continue;
    // Under the lock: a publication of the same binary waits for the delete
    // and then stores it anew.
    absl::Status deleted = fs_->Delete(file.path);
    if (!deleted.ok()) {
      Log()->warn("artifact store: cannot remove the unused job binary {}: {}", name, deleted.ToString());
      continue;
    }
    unused_since_.erase(since);
    ++collected.files;
    collected.bytes += file.size;
    stored -= file.size;
    Log()->info("artifact {} removed: no job used it for {} (jobmanager.artifact.retention)", name,
                absl::FormatDuration(retention));
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto it = unused_since_.begin(); it != unused_since_.end();) {
      it = present.contains(it->first) ? std::next(it) : unused_since_.erase(it);
    }
  }
  stored_bytes_ = stored;
  return collected;
}

absl::StatusOr<std::unique_ptr<ArtifactStore::Upload>> ArtifactStore::BeginUpload() {
  static std::atomic<int64_t> counter{0};
  static const std::string host = HostName();
  std::string staging = absl::StrCat(staging_dir_, "/", kStagingPrefix, host, "-", getpid(), "-", counter++);
  std::FILE* f = std::fopen(staging.c_str(), "wbx");
  if (f == nullptr) return StorageError("create a staging file", absl::StrCat(staging, ": ", Errno()));
  return std::unique_ptr<Upload>(new Upload(this, std::move(staging), f));
}

ArtifactStore::Upload::~Upload() {
  if (file_ != nullptr) std::fclose(file_);
  std::remove(staging_path_.c_str());
  store_->in_flight_bytes_ -= size_;
}

absl::Status ArtifactStore::Upload::Append(absl::string_view data) {
  if (size_ + static_cast<int64_t>(data.size()) > store_->max_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("the job binary is larger than the limit of ",
                                                     store_->max_bytes_, " bytes (jobmanager.artifact.max-size)"));
  }
  // The stored binaries are checked at Commit (this one may be stored
  // already); here the uploads in flight, which together may hold the quota.
  const auto n = static_cast<int64_t>(data.size());
  const int64_t in_flight = store_->in_flight_bytes_.fetch_add(n) + n;
  if (store_->quota_bytes_ > 0 && in_flight > store_->quota_bytes_) {
    store_->in_flight_bytes_ -= n;
    return store_->OverQuota();
  }
  if (file_ == nullptr || std::fwrite(data.data(), 1, data.size(), file_) != data.size()) {
    store_->in_flight_bytes_ -= n;
    return StorageError("stage the job binary", absl::StrCat(staging_path_, ": ", Errno()));
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
  if (file_ == nullptr) return absl::FailedPreconditionError("the upload was committed already");
  const bool flushed = std::fflush(file_) == 0;
  std::fclose(file_);
  file_ = nullptr;
  if (!flushed) return StorageError("stage the job binary", absl::StrCat(staging_path_, ": ", Errno()));
  std::string sha = sha_.HexDigest();
  RETURN_IF_ERROR(store_->Publish(staging_path_, sha, size_));
  return sha;
}

absl::StatusOr<bool> ArtifactStore::Matches(const std::string& path, const std::string& sha256, int64_t size) {
  ASSIGN_OR_RETURN(fs::FileInfo info, fs_->Stat(path));
  if (info.size != size) return false;
  if (!cheap_reads_) return true;
  crypto::Sha256 hash;
  for (int64_t offset = 0; offset < size;) {
    ASSIGN_OR_RETURN(std::string chunk, fs_->ReadRange(path, offset, std::min(kReadChunk, size - offset)));
    if (chunk.empty()) return false;
    hash.Update(chunk);
    offset += static_cast<int64_t>(chunk.size());
  }
  return hash.HexDigest() == sha256;
}

absl::Status ArtifactStore::Publish(const std::string& staging_path, const std::string& sha256, int64_t size) {
  const std::string path = ObjectPath(sha256);
  {
    absl::MutexLock lock(&mu_);
    publishing_.insert(sha256);
    unused_since_.erase(sha256);  // stored again: its retention starts over
  }
  auto done = [&] {
    absl::MutexLock lock(&mu_);
    publishing_.erase(publishing_.find(sha256));
    unused_since_.erase(sha256);
  };
  // Twice at most: an object that does not match is removed and published
  // anew; a publication that meets one appearing meanwhile checks that one.
  absl::Status status;
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<bool> matches = Matches(path, sha256, size);
    if (matches.ok() && *matches) {
      done();
      return absl::OkStatus();
    }
    if (matches.ok()) {
      Log()->warn("artifact store: the stored job binary {} is not what its name says (size or hash); replacing it",
                  sha256);
      absl::StatusOr<fs::FileInfo> old = fs_->Stat(path);
      if (absl::Status deleted = fs_->Delete(path); !deleted.ok()) {
        done();
        return StorageError("replace a damaged job binary", deleted.ToString());
      }
      if (old.ok()) stored_bytes_ -= old->size;
    } else if (!absl::IsNotFound(matches.status())) {
      done();
      return StorageError("check a stored job binary", matches.status().ToString());
    }
    if (quota_bytes_ > 0 && stored_bytes_.load() + size > quota_bytes_) {
      done();
      return OverQuota();
    }
    absl::StatusOr<int64_t> uploaded = fs_->UploadFile(staging_path, path, fs::WriteMode::kCreateNew);
    if (uploaded.ok()) {
      stored_bytes_ += *uploaded;
      Log()->info("artifact {} stored ({} bytes)", sha256, *uploaded);
      done();
      return absl::OkStatus();
    }
    status = uploaded.status();
    if (!absl::IsAlreadyExists(status)) break;
  }
  done();
  return StorageError("store the job binary", status.ToString());
}

absl::StatusOr<int64_t> ArtifactStore::SizeOf(absl::string_view sha256) {
  if (!crypto::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("'", sha256, "' is not an artifact id (64 lowercase hex)"));
  }
  absl::StatusOr<fs::FileInfo> info = fs_->Stat(ObjectPath(sha256));
  if (absl::IsNotFound(info.status())) {
    return absl::NotFoundError(
        absl::StrCat("the JobManager has no job binary ", sha256, "; upload it first (weir submit does)"));
  }
  if (!info.ok()) return StorageError(absl::StrCat("look up job binary ", sha256), info.status().ToString());
  return info->size;
}

absl::StatusOr<std::string> ArtifactStore::Read(absl::string_view sha256, int64_t offset, int64_t length) {
  if (!crypto::IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("'", sha256, "' is not an artifact id (64 lowercase hex)"));
  }
  absl::StatusOr<std::string> data = fs_->ReadRange(ObjectPath(sha256), offset, length);
  if (absl::IsNotFound(data.status())) {
    return absl::NotFoundError(absl::StrCat("the JobManager's job binary ", sha256, " was removed while it was read"));
  }
  if (!data.ok()) {
    // The store may come back (an object store's outage): worth another try.
    Log()->error("artifact store: reading job binary {} at {}: {}", sha256, offset, data.status().ToString());
    return absl::UnavailableError(
        absl::StrCat("the JobManager could not read job binary ", sha256, "; its log says why"));
  }
  return data;
}

}  // namespace weir::jobmanager
