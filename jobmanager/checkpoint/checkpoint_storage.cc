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

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
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

namespace fs = std::filesystem;

constexpr char kMagic[] = "WEIRCKPT";
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

std::string Sha256Hex(absl::string_view bytes) {
  crypto::Sha256 sha;
  sha.Update(bytes);
  return sha.HexDigest();
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

absl::StatusOr<CheckpointStorage> CheckpointStorage::Open(std::string job_dir) {
  if (job_dir.empty()) {
    return absl::InvalidArgumentError("the checkpoint directory is empty; check state.checkpoints.dir");
  }
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  if (ec || !fs::is_directory(job_dir, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the checkpoint directory ", job_dir, ": ",
                     ec ? ec.message() : std::string("it exists but is not a directory"),
                     "; check state.checkpoints.dir"));
  }
  return CheckpointStorage(std::move(job_dir));
}

absl::StatusOr<CheckpointStorage> CheckpointStorage::OpenExisting(std::string job_dir) {
  std::error_code ec;
  if (job_dir.empty() || !fs::is_directory(job_dir, ec)) {
    return absl::NotFoundError(absl::StrCat(job_dir, " is not a directory"));
  }
  return CheckpointStorage(std::move(job_dir));
}

std::string CheckpointStorage::CheckpointDir(int64_t id) const { return absl::StrCat(job_dir_, "/", kDirPrefix, id); }

std::string CheckpointStorage::MetadataPath(int64_t id) const {
  return absl::StrCat(CheckpointDir(id), "/", kMetadataName);
}

absl::Status CheckpointStorage::CreateCheckpointDir(int64_t id) {
  RETURN_IF_ERROR(CheckId(id));
  const std::string dir = CheckpointDir(id);
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
  file.append(Sha256Hex(payload));

  return Annotate(io::WriteFileAtomically(MetadataPath(id), file),
                  absl::StrCat("writing the metadata of checkpoint ", id));
}

absl::StatusOr<v1::CheckpointMetadata> CheckpointStorage::ReadMetadata(int64_t id) const {
  RETURN_IF_ERROR(CheckId(id));
  const std::string path = MetadataPath(id);
  absl::StatusOr<std::string> read = io::ReadWholeFile(path);
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
  const std::string actual = Sha256Hex(payload);
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
  const std::string path = MetadataPath(id);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT) return false;
  return ErrnoError("looking up", path, err);
}

absl::Status CheckpointStorage::VerifyTaskFiles(const v1::CheckpointMetadata& metadata) const {
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
    if (handle.finished()) {
      // A subtask that had finished: no file, and never one to restore.
      if (!handle.file().empty() || handle.shared_files_size() > 0) {
        return absl::DataLossError(absl::StrCat("checkpoint ", id, " records subtask ", handle.subtask_index(),
                                                " as finished but names a file for it"));
      }
      continue;
    }
    if (absl::Status name = ValidateTaskFileName(handle.file()); !name.ok()) {
      return absl::DataLossError(absl::StrCat("checkpoint ", id, " lists an unusable task file: ", name.message()));
    }
    if (!seen.insert(handle.file()).second) {
      return absl::DataLossError(absl::StrCat("checkpoint ", id, " lists the task file ", handle.file(), " twice"));
    }
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

absl::StatusOr<int> CheckpointStorage::CollectSharedGarbage(absl::Time older_than) const {
  const std::string dir = SharedDir();
  std::error_code ec;
  if (!fs::exists(dir, ec)) return 0;
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
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (referenced.contains(name)) continue;
    struct stat st;
    if (lstat(entry.path().c_str(), &st) != 0) continue;
    if (absl::TimeFromTimespec(st.st_mtim) >= older_than) continue;
    std::error_code remove_ec;
    if (fs::remove(entry.path(), remove_ec)) ++deleted;
  }
  if (ec) return absl::UnavailableError(absl::StrCat("listing ", dir, ": ", ec.message()));
  return deleted;
}

absl::StatusOr<std::vector<int64_t>> CheckpointStorage::ListIds() const {
  std::vector<int64_t> ids;
  std::error_code ec;
  fs::directory_iterator it(job_dir_, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
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
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("removing ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace weir::jobmanager::checkpoint
