#include "jobmanager/checkpoint/checkpoint_storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/crypto/sha256.h"
#include "common/io/atomic_file.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"

namespace weir::jobmanager::checkpoint {
namespace {

namespace stdfs = std::filesystem;

constexpr char kMagic[] = "WEIRCKPT";
// A _metadata read from an object store larger than this is refused unread.
constexpr int64_t kMaxRemoteMetadataBytes = int64_t{1} << 30;
constexpr char kSharedDirName[] = "shared";
constexpr size_t kMagicSize = 8;
constexpr size_t kHeaderSize = kMagicSize + 4 + 8;
constexpr size_t kChecksumSize = 64;
constexpr char kMetadataName[] = "_metadata";
constexpr char kDirPrefix[] = "chk-";
constexpr size_t kMaxTaskFileNameLength = 255;

// Disk trouble at run time is handled, not fatal: kUnavailable naming the
// operation, the path and the system's reason.
absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t ReadLittleEndian(const char* data, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<uint64_t>(static_cast<uint8_t>(data[i])) << (8 * i);
  return value;
}

}  // namespace

std::optional<int64_t> ParseCheckpointDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kDirPrefix)) return std::nullopt;
  if (name.empty() || name.size() > 19) return std::nullopt;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  if (name[0] == '0') return std::nullopt;
  int64_t id = 0;
  if (!absl::SimpleAtoi(name, &id) || id < 1) return std::nullopt;
  return id;
}

namespace {

absl::Status CheckId(int64_t id) {
  if (id < 1) return absl::InvalidArgumentError(absl::StrCat("checkpoint id ", id, " is not positive"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTaskFileName(absl::string_view file) {
  if (file.empty()) return absl::InvalidArgumentError("the task file name is empty");
  if (file.size() > kMaxTaskFileNameLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("the task file name has ", file.size(), " bytes; at most ", kMaxTaskFileNameLength));
  }
  if (file.find('/') != absl::string_view::npos || file.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the task file name '", file, "' is not a plain file name"));
  }
  if (file[0] == '.' || file[0] == '_') {
    return absl::InvalidArgumentError(
        absl::StrCat("the task file name '", file, "' starts with '", file.substr(0, 1),
                     "', which is reserved for the checkpoint coordinator"));
  }
  return absl::OkStatus();
}

namespace {

// What a task handle says of itself, checked before its files are looked
// up: a finished subtask names no file (and never has one to restore); any
// other names a plain file, not named by another handle of the checkpoint.
// Returns whether the handle has a file to look up.
absl::StatusOr<bool> CheckHandleNames(int64_t id, const v1::TaskStateHandle& handle,
                                      absl::flat_hash_set<absl::string_view>& seen) {
  if (handle.finished()) {
    if (!handle.file().empty() || handle.shared_files_size() > 0) {
      return absl::DataLossError(absl::StrCat("checkpoint ", id, " records subtask ", handle.subtask_index(),
                                              " as finished but names a file for it"));
    }
    return false;
  }
  if (absl::Status name = ValidateTaskFileName(handle.file()); !name.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id, " lists an unusable task file: ", name.message()));
  }
  if (!seen.insert(handle.file()).second) {
    return absl::DataLossError(absl::StrCat("checkpoint ", id, " lists the task file ", handle.file(), " twice"));
  }
  return true;
}

}  // namespace

absl::StatusOr<CheckpointStorage> CheckpointStorage::Open(std::string job_dir) {
  if (job_dir.empty()) {
    return absl::InvalidArgumentError("the checkpoint directory is empty; check state.checkpoints.dir");
  }
  if (fs::IsObjectStoreUri(job_dir)) {
    ASSIGN_OR_RETURN(fs::ObjectStorePath remote, fs::OpenObjectStorePath(job_dir));
    RETURN_IF_ERROR(fs::ProbeObjectStore(job_dir, "state.checkpoints.dir"));
    return CheckpointStorage(std::move(job_dir), std::move(remote));
  }
  std::error_code ec;
  stdfs::create_directories(job_dir, ec);
  if (ec || !stdfs::is_directory(job_dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the checkpoint directory ", job_dir, ": ",
                     ec ? ec.message() : std::string("it exists but is not a directory"),
                     "; check state.checkpoints.dir"));
  }
  return CheckpointStorage(std::move(job_dir));
}

absl::StatusOr<CheckpointStorage> CheckpointStorage::OpenExisting(std::string job_dir) {
  if (fs::IsObjectStoreUri(job_dir)) {
    ASSIGN_OR_RETURN(fs::ObjectStorePath remote, fs::OpenObjectStorePath(job_dir));
    ASSIGN_OR_RETURN(std::vector<fs::FileInfo> files, remote.fs->List(absl::StrCat(remote.path, "/")));
    if (files.empty()) return absl::NotFoundError(absl::StrCat("nothing is stored under ", job_dir));
    return CheckpointStorage(std::move(job_dir), std::move(remote));
  }
  std::error_code ec;
  if (job_dir.empty() || !stdfs::is_directory(job_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(job_dir, " is not a directory"));
  }
  return CheckpointStorage(std::move(job_dir));
}

std::string CheckpointStorage::CheckpointDir(int64_t id) const { return absl::StrCat(job_dir_, "/", kDirPrefix, id); }

std::string CheckpointStorage::RemoteCheckpointPath(int64_t id, absl::string_view name) const {
  const std::string dir = remote_.Child(absl::StrCat(kDirPrefix, id));
  return name.empty() ? dir : absl::StrCat(dir, "/", name);
}

std::string CheckpointStorage::MetadataPath(int64_t id) const {
  return absl::StrCat(CheckpointDir(id), "/", kMetadataName);
}

absl::Status CheckpointStorage::CreateCheckpointDir(int64_t id) {
  RETURN_IF_ERROR(CheckId(id));
  const std::string dir = CheckpointDir(id);
  if (remote()) {
    ASSIGN_OR_RETURN(bool exists, HasMetadata(id));
    if (exists) {
      return absl::AlreadyExistsError(
          absl::StrCat("checkpoint ", dir, " already has a _metadata; checkpoint ids are never reused"));
    }
    return absl::OkStatus();
  }
  if (mkdir(dir.c_str(), 0755) != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat("the checkpoint directory ", dir, " already exists; checkpoint ids are never reused"));
    }
    return ErrnoError("creating the checkpoint directory", dir, err);
  }
  return io::SyncDirectory(job_dir_);
}

absl::Status CheckpointStorage::WriteMetadata(const v1::CheckpointMetadata& metadata) {
  const int64_t id = metadata.checkpoint_id();
  RETURN_IF_ERROR(CheckId(id));
  std::string payload;
  if (!metadata.SerializeToString(&payload)) {
    return absl::InternalError(absl::StrCat("checkpoint ", id, ": the metadata does not serialize"));
  }
  std::string file(kMagic, kMagicSize);
  AppendLittleEndian(&file, kMetadataFormatVersion, 4);
  AppendLittleEndian(&file, payload.size(), 8);
  file.append(payload);
  file.append(crypto::Sha256Hex(payload));

  if (remote()) {
    const std::string path = RemoteCheckpointPath(id, kMetadataName);
    absl::Status written = remote_.fs->Write(path, file, fs::WriteMode::kCreateNew);
    if (absl::IsAlreadyExists(written)) {
      // A retried create whose first try took effect reads back as ours.
      absl::StatusOr<std::string> there = remote_.fs->ReadFile(path, static_cast<int64_t>(file.size()) + 1);
      if (there.ok() && *there == file) written = absl::OkStatus();
    }
    return Annotate(written, absl::StrCat("writing the metadata of checkpoint ", id));
  }
  return Annotate(io::WriteFileAtomically(MetadataPath(id), file),
                  absl::StrCat("writing the metadata of checkpoint ", id));
}

absl::StatusOr<v1::CheckpointMetadata> CheckpointStorage::ReadMetadata(int64_t id) const {
  RETURN_IF_ERROR(CheckId(id));
  const std::string path = MetadataPath(id);
  absl::StatusOr<std::string> read =
      remote() ? remote_.fs->ReadFile(RemoteCheckpointPath(id, kMetadataName), kMaxRemoteMetadataBytes)
               : io::ReadWholeFile(path);
  if (absl::IsNotFound(read.status())) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist: the checkpoint never completed"));
  }
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat(path, " is unusable: ", why));
  };

  if (bytes.size() < kMagicSize) {
    return corrupt(absl::StrCat("truncated: ", bytes.size(), " bytes, less than the ", kHeaderSize, "-byte header"));
  }
  if (std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) return corrupt("it does not start with the magic WEIRCKPT");
  if (bytes.size() < kHeaderSize) {
    return corrupt(absl::StrCat("truncated: ", bytes.size(), " bytes, less than the ", kHeaderSize, "-byte header"));
  }
  const uint32_t version = static_cast<uint32_t>(ReadLittleEndian(bytes.data() + kMagicSize, 4));
  if (version > kMetadataFormatVersion) {
    return corrupt(absl::StrCat("format version ", version, " is newer than this Weir understands (",
                                kMetadataFormatVersion, ")"));
  }
  if (version != kMetadataFormatVersion) {
    return corrupt(absl::StrCat("format version ", version, " is not one this Weir understands (",
                                kMetadataFormatVersion, ")"));
  }
  const uint64_t length = ReadLittleEndian(bytes.data() + kMagicSize + 4, 8);
  const uint64_t after_header = bytes.size() - kHeaderSize;
  if (after_header < kChecksumSize || length > after_header - kChecksumSize) {
    return corrupt(absl::StrCat("truncated: the header announces a ", length, "-byte payload and a ", kChecksumSize,
                                "-byte checksum, but only ", after_header, " bytes follow it"));
  }
  if (length + kChecksumSize != after_header) {
    return corrupt(absl::StrCat(after_header - length - kChecksumSize, " unexpected bytes follow the checksum"));
  }
  const absl::string_view payload(bytes.data() + kHeaderSize, length);
  const absl::string_view recorded(bytes.data() + kHeaderSize + length, kChecksumSize);
  const std::string actual = crypto::Sha256Hex(payload);
  if (actual != recorded) {
    return corrupt(absl::StrCat("checksum mismatch: the payload's SHA-256 is ", actual, ", the file records ",
                                absl::CHexEscape(recorded)));
  }
  v1::CheckpointMetadata metadata;
  if (!metadata.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("the payload does not parse as CheckpointMetadata");
  }
  if (metadata.checkpoint_id() != id) {
    return corrupt(absl::StrCat("it holds the metadata of checkpoint ", metadata.checkpoint_id(), ", not of ", id));
  }
  return metadata;
}

absl::StatusOr<bool> CheckpointStorage::HasMetadata(int64_t id) const {
  RETURN_IF_ERROR(CheckId(id));
  if (remote()) return remote_.fs->Exists(RemoteCheckpointPath(id, kMetadataName));
  const std::string path = MetadataPath(id);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  return ErrnoError("looking up", path, err);
}

absl::Status CheckpointStorage::VerifyTaskFiles(const v1::CheckpointMetadata& metadata) const {
  if (remote()) return VerifyRemoteTaskFiles(metadata);
  const int64_t id = metadata.checkpoint_id();
  RETURN_IF_ERROR(CheckId(id));
  const std::string dir = CheckpointDir(id);
  // Looked up relative to the directories, opened once: at thousands of
  // tasks a full path walk per file is most of the coordinator's work.
  // O_PATH: lookups need search permission only, as lstat of a path did.
  const int dir_fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    const int err = errno;
    if (err == ENOENT) return absl::DataLossError(absl::StrCat("checkpoint directory ", dir, " is missing"));
    return ErrnoError("opening", dir, err);
  }
  int shared_fd = -1;
  absl::Cleanup close_dirs = [&] {
    close(dir_fd);
    if (shared_fd >= 0) close(shared_fd);
  };
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(metadata.tasks_size());
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    ASSIGN_OR_RETURN(bool has_file, CheckHandleNames(id, handle, seen));
    if (!has_file) continue;
    struct stat st;
    if (fstatat(dir_fd, handle.file().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      const int err = errno;
      const std::string path = absl::StrCat(dir, "/", handle.file());
      if (err == ENOENT) return absl::DataLossError(absl::StrCat("task file ", path, " is missing"));
      return ErrnoError("looking up task file", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::DataLossError(absl::StrCat("task file ", dir, "/", handle.file(), " is not a regular file"));
    }
    if (static_cast<int64_t>(st.st_size) != handle.size_bytes()) {
      return absl::DataLossError(absl::StrCat("task file ", dir, "/", handle.file(), " has ", st.st_size,
                                              " bytes; the checkpoint recorded ", handle.size_bytes()));
    }
    for (const std::string& shared : handle.shared_files()) {
      if (absl::Status name = ValidateTaskFileName(shared); !name.ok()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, " refers to an unusable shared file: ",
                                                name.message()));
      }
      if (shared_fd < 0) {
        shared_fd = open(SharedDir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (shared_fd < 0) {
          const int err = errno;
          if (err == ENOENT) {
            return absl::DataLossError(absl::StrCat("shared state file ", SharedDir(), "/", shared, " is missing"));
          }
          return ErrnoError("opening", SharedDir(), err);
        }
      }
      if (fstatat(shared_fd, shared.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        const int err = errno;
        const std::string shared_path = absl::StrCat(SharedDir(), "/", shared);
        if (err == ENOENT) return absl::DataLossError(absl::StrCat("shared state file ", shared_path, " is missing"));
        return ErrnoError("looking up shared state file", shared_path, err);
      }
      if (!S_ISREG(st.st_mode)) {
        return absl::DataLossError(
            absl::StrCat("shared state file ", SharedDir(), "/", shared, " is not a regular file"));
      }
    }
  }
  return absl::OkStatus();
}

std::string CheckpointStorage::SharedDir() const { return absl::StrCat(job_dir_, "/shared"); }

absl::StatusOr<int> CheckpointStorage::CollectSharedGarbage(absl::Time older_than,
                                                            int64_t below_checkpoint_id) const {
  if (remote()) return CollectRemoteSharedGarbage(below_checkpoint_id);
  const std::string dir = SharedDir();
  std::error_code ec;
  if (!stdfs::exists(dir, ec)) return 0;
  absl::flat_hash_set<std::string> referenced;
  for (int64_t id : ListCheckpointIds()) {
    absl::StatusOr<v1::CheckpointMetadata> metadata = ReadMetadata(id);
    if (absl::IsNotFound(metadata.status())) continue;  // in progress or abandoned: see older_than
    if (!metadata.ok()) {
      return Annotate(metadata.status(), absl::StrCat("keeping every shared file: checkpoint ", id,
                                                      " may refer to any of them"));
    }
    for (const v1::TaskStateHandle& handle : metadata->tasks()) {
      referenced.insert(handle.shared_files().begin(), handle.shared_files().end());
    }
  }
  int deleted = 0;
  for (const stdfs::directory_entry& entry : stdfs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (referenced.contains(name)) continue;
    struct stat st;
    if (lstat(entry.path().c_str(), &st) != 0) continue;
    if (absl::TimeFromTimespec(st.st_mtim) >= older_than) continue;
    std::error_code remove_ec;
    if (stdfs::remove(entry.path(), remove_ec)) ++deleted;
  }
  if (ec) return absl::UnavailableError(absl::StrCat("listing ", dir, ": ", ec.message()));
  return deleted;
}

absl::StatusOr<std::vector<int64_t>> CheckpointStorage::ListIds() const {
  if (remote()) return ListRemoteIds();
  std::vector<int64_t> ids;
  std::error_code ec;
  stdfs::directory_iterator it(job_dir_, ec);
  for (; !ec && it != stdfs::directory_iterator(); it.increment(ec)) {
    const std::optional<int64_t> id = ParseCheckpointDirName(it->path().filename().string());
    if (!id.has_value()) continue;
    std::error_code type_ec;
    // A symlink is not a directory this class made.
    if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
    ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  if (ec) {
    return absl::UnavailableError(absl::StrCat("listing the checkpoint directory ", job_dir_, ": ", ec.message()));
  }
  return ids;
}

std::vector<int64_t> CheckpointStorage::ListCheckpointIds() const {
  absl::StatusOr<std::vector<int64_t>> ids = ListIds();
  if (!ids.ok()) {
    static const std::shared_ptr<spdlog::logger> log = logging::Get("checkpoint");
    log->warn("{}", ids.status().message());
    return {};
  }
  return *std::move(ids);
}

absl::StatusOr<std::optional<v1::CheckpointMetadata>> CheckpointStorage::LatestValid(
    std::vector<std::string>* skipped) const {
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, ListIds());
  const std::string context = absl::StrCat("finding the latest valid checkpoint in ", job_dir_);
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) {
    const int64_t id = *it;
    absl::StatusOr<v1::CheckpointMetadata> metadata = ReadMetadata(id);
    absl::Status status = metadata.status();
    if (status.ok()) status = VerifyTaskFiles(*metadata);
    if (status.ok()) return std::optional<v1::CheckpointMetadata>(*std::move(metadata));
    if (!absl::IsNotFound(status) && !absl::IsDataLoss(status)) return Annotate(status, context);
    if (skipped != nullptr) skipped->push_back(absl::StrCat("checkpoint ", id, ": ", status.message()));
  }
  return std::optional<v1::CheckpointMetadata>();
}

absl::Status CheckpointStorage::Discard(int64_t id) {
  RETURN_IF_ERROR(CheckId(id));
  const std::string dir = CheckpointDir(id);
  if (remote()) {
    ASSIGN_OR_RETURN(std::vector<fs::FileInfo> files, remote_.fs->List(absl::StrCat(RemoteCheckpointPath(id, ""), "/")));
    std::vector<std::string> paths;
    paths.reserve(files.size());
    // _metadata first: a checkpoint half deleted is incomplete, never corrupt.
    for (const fs::FileInfo& f : files) {
      if (absl::EndsWith(f.path, absl::StrCat("/", kMetadataName))) paths.insert(paths.begin(), f.path);
      else paths.push_back(f.path);
    }
    return Annotate(remote_.fs->DeleteMany(paths), absl::StrCat("removing ", dir));
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("removing ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status CheckpointStorage::DiscardAll() const {
  if (remote()) {
    ASSIGN_OR_RETURN(std::vector<fs::FileInfo> files, remote_.fs->List(absl::StrCat(remote_.path, "/")));
    std::vector<std::string> paths;
    paths.reserve(files.size());
    // Every _metadata first: a restore never finds a complete checkpoint
    // with files missing.
    for (const fs::FileInfo& f : files) {
      if (absl::EndsWith(f.path, absl::StrCat("/", kMetadataName))) paths.push_back(f.path);
    }
    RETURN_IF_ERROR(Annotate(remote_.fs->DeleteMany(paths), absl::StrCat("removing ", job_dir_)));
    paths.clear();
    for (const fs::FileInfo& f : files) {
      if (!absl::EndsWith(f.path, absl::StrCat("/", kMetadataName))) paths.push_back(f.path);
    }
    return Annotate(remote_.fs->DeleteMany(paths), absl::StrCat("removing ", job_dir_));
  }
  std::error_code ec;
  stdfs::remove_all(job_dir_, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("removing ", job_dir_, ": ", ec.message()));
  return absl::OkStatus();
}

std::string SharedFilePrefix(int64_t id) { return absl::StrCat("c", id, "-"); }

std::optional<int64_t> SharedFileCheckpointId(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "c")) return std::nullopt;
  const size_t dash = name.find('-');
  if (dash == absl::string_view::npos || dash == 0 || dash > 19) return std::nullopt;
  int64_t id = 0;
  if (!absl::SimpleAtoi(name.substr(0, dash), &id) || id < 1) return std::nullopt;
  return id;
}

absl::Status CheckpointStorage::VerifyRemoteTaskFiles(const v1::CheckpointMetadata& metadata) const {
  const int64_t id = metadata.checkpoint_id();
  RETURN_IF_ERROR(CheckId(id));
  const std::string dir = CheckpointDir(id);
  // Two listings, not a request per file: a job of thousands of tasks
  // verifies in a few round trips. They run at once: the checkpoint waits
  // for them.
  const std::string prefix = absl::StrCat(RemoteCheckpointPath(id, ""), "/");
  const std::string shared_prefix = absl::StrCat(remote_.Child(kSharedDirName), "/");
  bool refers_to_shared = false;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) refers_to_shared |= handle.shared_files_size() > 0;
  absl::StatusOr<std::vector<fs::FileInfo>> shared_listed = std::vector<fs::FileInfo>();
  std::thread shared_lister;
  if (refers_to_shared) shared_lister = std::thread([&] { shared_listed = remote_.fs->List(shared_prefix); });
  absl::StatusOr<std::vector<fs::FileInfo>> checkpoint_listed = remote_.fs->List(prefix);
  if (shared_lister.joinable()) shared_lister.join();
  ASSIGN_OR_RETURN(std::vector<fs::FileInfo> listed, std::move(checkpoint_listed));
  absl::flat_hash_map<std::string, int64_t> sizes;
  for (const fs::FileInfo& f : listed) sizes[f.path.substr(prefix.size())] = f.size;
  std::optional<absl::flat_hash_set<std::string>> shared;
  absl::flat_hash_set<absl::string_view> seen;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    ASSIGN_OR_RETURN(bool has_file, CheckHandleNames(id, handle, seen));
    if (!has_file) continue;
    auto found = sizes.find(handle.file());
    if (found == sizes.end()) {
      return absl::DataLossError(absl::StrCat("task file ", dir, "/", handle.file(), " is missing"));
    }
    if (found->second != handle.size_bytes()) {
      return absl::DataLossError(absl::StrCat("task file ", dir, "/", handle.file(), " has ", found->second,
                                              " bytes; the checkpoint recorded ", handle.size_bytes()));
    }
    for (const std::string& name : handle.shared_files()) {
      if (absl::Status valid = ValidateTaskFileName(name); !valid.ok()) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, " refers to an unusable shared file: ",
                                                valid.message()));
      }
      if (!shared.has_value()) {
        ASSIGN_OR_RETURN(std::vector<fs::FileInfo> files, std::move(shared_listed));
        shared.emplace();
        for (const fs::FileInfo& f : files) shared->insert(f.path.substr(shared_prefix.size()));
      }
      if (!shared->contains(name)) {
        return absl::DataLossError(absl::StrCat("shared state file ", SharedDir(), "/", name, " is missing"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CheckpointStorage::CollectRemoteSharedGarbage(int64_t below_checkpoint_id) const {
  const std::string shared_prefix = absl::StrCat(remote_.Child(kSharedDirName), "/");
  ASSIGN_OR_RETURN(std::vector<fs::FileInfo> files, remote_.fs->List(shared_prefix));
  if (files.empty()) return 0;
  absl::flat_hash_set<std::string> referenced;
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, ListIds());
  for (int64_t id : ids) {
    absl::StatusOr<v1::CheckpointMetadata> metadata = ReadMetadata(id);
    if (absl::IsNotFound(metadata.status())) continue;  // in progress or abandoned: see below_checkpoint_id
    if (!metadata.ok()) {
      return Annotate(metadata.status(), absl::StrCat("keeping every shared file: checkpoint ", id,
                                                      " may refer to any of them"));
    }
    for (const v1::TaskStateHandle& handle : metadata->tasks()) {
      referenced.insert(handle.shared_files().begin(), handle.shared_files().end());
    }
  }
  std::vector<std::string> garbage;
  for (const fs::FileInfo& f : files) {
    const std::string name = f.path.substr(shared_prefix.size());
    if (referenced.contains(name)) continue;
    const std::optional<int64_t> uploaded_by = SharedFileCheckpointId(name);
    if (!uploaded_by.has_value() || *uploaded_by >= below_checkpoint_id) continue;
    garbage.push_back(f.path);
  }
  if (garbage.empty()) return 0;
  RETURN_IF_ERROR(Annotate(remote_.fs->DeleteMany(garbage), absl::StrCat("deleting shared files of ", job_dir_)));
  return static_cast<int>(garbage.size());
}

absl::StatusOr<std::vector<int64_t>> CheckpointStorage::ListRemoteIds() const {
  const std::string prefix = absl::StrCat(remote_.path, "/");
  absl::StatusOr<std::vector<fs::FileInfo>> files = remote_.fs->List(prefix);
  if (!files.ok()) return Annotate(files.status(), absl::StrCat("listing the checkpoint directory ", job_dir_));
  std::vector<int64_t> ids;
  for (const fs::FileInfo& f : *files) {
    absl::string_view rest = absl::string_view(f.path).substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == absl::string_view::npos) continue;  // a file in the job directory itself
    const std::optional<int64_t> id = ParseCheckpointDirName(rest.substr(0, slash));
    if (!id.has_value()) continue;
    if (ids.empty() || ids.back() != *id) ids.push_back(*id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace weir::jobmanager::checkpoint
