#include "jobmanager/checkpoint/savepoint.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::jobmanager::checkpoint {
namespace {

namespace fs = std::filesystem;

constexpr char kMarker[] = "_savepoint";

}  // namespace

absl::StatusOr<std::string> PathInside(const std::string& root, const std::string& given, const char* root_key) {
  if (root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(root_key, " is not set: savepoints are kept only under it"));
  }
  fs::path base = fs::absolute(fs::path(root)).lexically_normal();
  if (base.filename().empty()) base = base.parent_path();  // "dir/" -> "dir"
  fs::path candidate = given.empty() ? base : fs::path(given);
  if (candidate.is_relative()) candidate = base / candidate;
  candidate = candidate.lexically_normal();  // resolves "..", so a prefix test suffices
  if (std::mismatch(base.begin(), base.end(), candidate.begin(), candidate.end()).first != base.end()) {
    return absl::InvalidArgumentError(absl::StrCat("'", given, "' is outside ", root_key, " (", base.string(),
                                                   "); savepoints are written and read only there"));
  }
  // Again with symbolic links resolved (as far as the path exists): a link
  // inside the directory must not lead a client elsewhere.
  std::error_code ec;
  fs::path real_base = fs::weakly_canonical(base, ec);
  if (ec) real_base = base;
  const fs::path real_candidate = fs::weakly_canonical(candidate, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve '", given, "' inside ", root_key, ": ", ec.message()));
  }
  if (std::mismatch(real_base.begin(), real_base.end(), real_candidate.begin(), real_candidate.end()).first !=
      real_base.end()) {
    return absl::InvalidArgumentError(absl::StrCat("'", given, "' leads outside ", root_key, " (", base.string(),
                                                   ") through a symbolic link, to ", real_candidate.string(),
                                                   "; savepoints are written and read only there"));
  }
  return candidate.string();
}

absl::StatusOr<std::string> WriteSavepoint(const CheckpointStorage& storage, int64_t id, const std::string& target,
                                           const std::string& job_id) {
  std::error_code ec;
  fs::create_directories(target, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", target, ": ", ec.message()));
  std::random_device random;
  const std::string path =
      absl::StrCat(target, "/", absl::StrFormat("savepoint-%s-%06x", job_id, random() & 0xffffff));
  const std::string from = storage.CheckpointDir(id);
  const std::string to = absl::StrCat(path, "/", fs::path(from).filename().string());
  fs::create_directories(to, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", to, ": ", ec.message()));
  // Every file, in subdirectories too (RocksDB state), each fsynced.
  for (auto it = fs::recursive_directory_iterator(from, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path relative = fs::relative(it->path(), from, ec);
    if (ec) break;
    const fs::path dest = fs::path(to) / relative;
    if (it->is_directory()) {
      fs::create_directories(dest, ec);
    } else if (it->is_regular_file()) {
      absl::StatusOr<int64_t> copied = io::CopyFileDurably(it->path().string(), dest.string());
      if (!copied.ok()) return Annotate(copied.status(), absl::StrCat("copying checkpoint ", id, " into ", path));
    }
    if (ec) break;
  }
  if (ec) return absl::UnavailableError(absl::StrCat("copying checkpoint ", id, " into ", path, ": ", ec.message()));
  // The shared files it refers to (incremental checkpoints), so that the
  // savepoint is self-contained: <savepoint>/shared mirrors <job dir>/shared.
  ASSIGN_OR_RETURN(v1::CheckpointMetadata metadata, storage.ReadMetadata(id));
  const std::string shared_to = absl::StrCat(path, "/shared");
  bool any_shared = false;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    for (const std::string& name : handle.shared_files()) {
      if (!any_shared) {
        fs::create_directories(shared_to, ec);
        if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", shared_to, ": ", ec.message()));
        any_shared = true;
      }
      RETURN_IF_ERROR(ValidateTaskFileName(name));
      absl::StatusOr<int64_t> copied = io::CopyFileDurably(absl::StrCat(storage.SharedDir(), "/", name),
                                                          absl::StrCat(shared_to, "/", name));
      if (!copied.ok()) return Annotate(copied.status(), absl::StrCat("copying checkpoint ", id, " into ", path));
    }
  }
  if (any_shared) RETURN_IF_ERROR(io::SyncDirectory(shared_to));
  for (auto it = fs::recursive_directory_iterator(to, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_directory()) RETURN_IF_ERROR(io::SyncDirectory(it->path().string()));
  }
  RETURN_IF_ERROR(io::SyncDirectory(to));
  // Last: the marker that makes it a savepoint.
  RETURN_IF_ERROR(io::WriteFileAtomically(absl::StrCat(path, "/", kMarker),
                                          absl::StrCat("weir-savepoint ", kSavepointFormatVersion, "\n")));
  return path;
}

absl::StatusOr<Savepoint> ReadSavepoint(const std::string& path) {
  absl::StatusOr<std::string> marker = io::ReadWholeFile(absl::StrCat(path, "/", kMarker));
  if (!marker.ok()) {
    return absl::NotFoundError(absl::StrCat(path, " is not a savepoint (no ", kMarker, " file: ",
                                            marker.status().message(), ")"));
  }
  absl::string_view text = absl::StripAsciiWhitespace(*marker);
  int version = 0;
  if (!absl::ConsumePrefix(&text, "weir-savepoint ") || !absl::SimpleAtoi(text, &version)) {
    return absl::DataLossError(absl::StrCat(path, "/", kMarker, " is damaged"));
  }
  if (version != kSavepointFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("the savepoint at ", path, " has format version ", version,
                                                      "; this Weir reads version ", kSavepointFormatVersion,
                                                      " only"));
  }
  ASSIGN_OR_RETURN(CheckpointStorage storage, CheckpointStorage::Open(path));
  const std::vector<int64_t> ids = storage.ListCheckpointIds();
  if (ids.size() != 1) {
    return absl::DataLossError(absl::StrCat("the savepoint at ", path, " holds ", ids.size(),
                                            " checkpoints; expected exactly one"));
  }
  ASSIGN_OR_RETURN(v1::CheckpointMetadata metadata, storage.ReadMetadata(ids[0]));
  RETURN_IF_ERROR(storage.VerifyTaskFiles(metadata));
  return Savepoint{path, std::move(storage), std::move(metadata)};
}

absl::StatusOr<RestorePoint> ReadRestorePoint(const std::string& path) {
  std::error_code ec;
  if (fs::exists(absl::StrCat(path, "/", kMarker), ec)) {
    ASSIGN_OR_RETURN(Savepoint savepoint, ReadSavepoint(path));
    RestorePoint point;
    point.path = path;
    point.checkpoint_dir = savepoint.storage.CheckpointDir(savepoint.metadata.checkpoint_id());
    point.metadata = std::move(savepoint.metadata);
    point.is_savepoint = true;
    return point;
  }
  if (!fs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist (or is not a directory)"));
  }
  fs::path normal = fs::path(path).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "chk-3/" -> "chk-3"
  RestorePoint point;
  point.path = path;
  if (std::optional<int64_t> id = ParseCheckpointDirName(normal.filename().string()); id.has_value()) {
    // One retained checkpoint.
    ASSIGN_OR_RETURN(CheckpointStorage storage, CheckpointStorage::OpenExisting(normal.parent_path().string()));
    absl::StatusOr<v1::CheckpointMetadata> metadata = storage.ReadMetadata(*id);
    if (absl::IsNotFound(metadata.status())) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", *id, " in ", path,
                                              " never completed (it has no _metadata); restore a complete one"));
    }
    if (!metadata.ok()) return metadata.status();
    RETURN_IF_ERROR(storage.VerifyTaskFiles(*metadata));
    point.checkpoint_dir = storage.CheckpointDir(*id);
    point.metadata = *std::move(metadata);
    return point;
  }
  // A job's checkpoint directory: its newest intact checkpoint.
  ASSIGN_OR_RETURN(CheckpointStorage storage, CheckpointStorage::OpenExisting(normal.string()));
  if (storage.ListCheckpointIds().empty()) {
    return absl::NotFoundError(absl::StrCat(path, " is neither a savepoint (no ", kMarker, " file) nor a checkpoint "
                                            "(chk-<n>) nor a job's checkpoint directory (no chk-<n> in it)"));
  }
  ASSIGN_OR_RETURN(std::optional<v1::CheckpointMetadata> latest, storage.LatestValid(&point.skipped));
  if (!latest.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path, " is complete and intact",
                                            point.skipped.empty() ? "" : ": ",
                                            absl::StrJoin(point.skipped, "; ")));
  }
  point.checkpoint_dir = storage.CheckpointDir(latest->checkpoint_id());
  point.metadata = *std::move(latest);
  return point;
}

}  // namespace weir::jobmanager::checkpoint
