#include "jobmanager/checkpoint/savepoint.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "common/fs/file_system_registry.h"
#include "common/fs/local_file_system.h"
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::jobmanager::checkpoint {
namespace {

namespace stdfs = std::filesystem;

constexpr char kMarker[] = "_savepoint";
constexpr int64_t kCopyChunk = int64_t{8} << 20;
constexpr int64_t kMaxMarkerBytes = 4096;

// A directory as a FileSystem and a path in it: a local directory through a
// LocalFileSystem on it, an object-store URI through its bucket's.
absl::StatusOr<weir::fs::ObjectStorePath> PlaceOf(const std::string& location) {
  if (weir::fs::IsObjectStoreUri(location)) return weir::fs::OpenObjectStorePath(location);
  ASSIGN_OR_RETURN(std::unique_ptr<weir::fs::LocalFileSystem> local, weir::fs::LocalFileSystem::Open(location));
  return weir::fs::ObjectStorePath{std::shared_ptr<weir::fs::FileSystem>(std::move(local)), ""};
}

// What List takes to list everything below `place`.
std::string PrefixOf(const weir::fs::ObjectStorePath& place) { return place.path.empty() ? "" : place.path + "/"; }

// Copies one file from one FileSystem to another, a chunk at a time.
absl::Status CopyBetween(weir::fs::FileSystem& from, const std::string& from_path, weir::fs::FileSystem& to,
                         const std::string& to_path) {
  ASSIGN_OR_RETURN(weir::fs::FileInfo info, from.Stat(from_path));
  ASSIGN_OR_RETURN(std::unique_ptr<weir::fs::FileWriter> writer, to.NewWriter(to_path, weir::fs::WriteMode::kOverwrite));
  for (int64_t offset = 0; offset < info.size;) {
    absl::StatusOr<std::string> chunk = from.ReadRange(from_path, offset, std::min(kCopyChunk, info.size - offset));
    absl::Status status = chunk.status();
    if (status.ok() && chunk->empty()) {
      status = absl::DataLossError(absl::StrCat(from_path, " ended at ", offset, " of ", info.size, " bytes"));
    }
    if (status.ok()) status = writer->Append(*chunk);
    if (!status.ok()) {
      (void)writer->Abort();
      return status;
    }
    offset += static_cast<int64_t>(chunk->size());
  }
  return writer->Close();
}

// A URI's last segment and what comes before it.
std::pair<std::string, std::string> SplitLast(const std::string& uri) {
  std::string trimmed = uri;
  while (!trimmed.empty() && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return {"", trimmed};
  return {trimmed.substr(0, slash), trimmed.substr(slash + 1)};
}

// WriteSavepoint when the checkpoint or the target is in an object store:
// the same layout, each file copied through the FileSystems, the marker
// last (a conditional create).
absl::StatusOr<std::string> WriteSavepointThroughFileSystems(const CheckpointStorage& storage, int64_t id,
                                                             const std::string& path) {
  const std::string context = absl::StrCat("copying checkpoint ", id, " into ", path);
  ASSIGN_OR_RETURN(weir::fs::ObjectStorePath from, PlaceOf(storage.CheckpointDir(id)));
  ASSIGN_OR_RETURN(weir::fs::ObjectStorePath to, PlaceOf(path));
  ASSIGN_OR_RETURN(std::vector<weir::fs::FileInfo> files, from.fs->List(PrefixOf(from)));
  const std::string chk = absl::StrCat("chk-", id);
  const size_t skip = PrefixOf(from).size();
  for (const weir::fs::FileInfo& f : files) {
    RETURN_IF_ERROR(Annotate(CopyBetween(*from.fs, f.path, *to.fs, to.Child(absl::StrCat(chk, "/", f.path.substr(skip)))),
                             context));
  }
  ASSIGN_OR_RETURN(v1::CheckpointMetadata metadata, storage.ReadMetadata(id));
  std::optional<weir::fs::ObjectStorePath> shared;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    for (const std::string& name : handle.shared_files()) {
      RETURN_IF_ERROR(ValidateTaskFileName(name));
      if (!shared.has_value()) {
        ASSIGN_OR_RETURN(shared, PlaceOf(storage.SharedDir()));
      }
      RETURN_IF_ERROR(Annotate(CopyBetween(*shared->fs, shared->Child(name), *to.fs, to.Child(absl::StrCat("shared/", name))),
                               context));
    }
  }
  RETURN_IF_ERROR(to.fs->Write(to.Child(kMarker), absl::StrCat("weir-savepoint ", kSavepointFormatVersion, "\n"),
                               weir::fs::WriteMode::kCreateNew));
  return path;
}

}  // namespace

bool RestorePathExists(const std::string& path) {
  if (!weir::fs::IsObjectStoreUri(path)) {
    std::error_code ec;
    return stdfs::exists(path, ec);
  }
  absl::StatusOr<weir::fs::ObjectStorePath> place = weir::fs::OpenObjectStorePath(path);
  if (!place.ok()) return false;
  absl::StatusOr<std::vector<weir::fs::FileInfo>> files = place->fs->List(PrefixOf(*place));
  return files.ok() && !files->empty();
}

absl::StatusOr<std::string> PathInside(const std::string& root, const std::string& given, const char* root_key) {
  if (root.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(root_key, " is not set: savepoints are kept only under it"));
  }
  if (weir::fs::IsObjectStoreUri(root)) {
    std::string base = root;
    while (!base.empty() && base.back() == '/') base.pop_back();
    std::string candidate = given.empty() ? base : given;
    if (!weir::fs::IsObjectStoreUri(candidate)) {
      if (absl::StartsWith(candidate, "/")) candidate = "";  // a local path: outside
      else candidate = absl::StrCat(base, "/", candidate);
    }
    while (!candidate.empty() && candidate.back() == '/') candidate.pop_back();
    bool inside = candidate == base || absl::StartsWith(candidate, base + "/");
    for (absl::string_view segment : absl::StrSplit(absl::string_view(candidate).substr(std::min(candidate.size(), base.size())), '/')) {
      if (segment == "." || segment == "..") inside = false;
    }
    if (!inside) {
      return absl::InvalidArgumentError(absl::StrCat("'", given, "' is outside ", root_key, " (", base,
                                                     "); savepoints are written and read only there"));
    }
    return candidate;
  }
  stdfs::path base = stdfs::absolute(stdfs::path(root)).lexically_normal();
  if (base.filename().empty()) base = base.parent_path();  // "dir/" -> "dir"
  stdfs::path candidate = given.empty() ? base : stdfs::path(given);
  if (candidate.is_relative()) candidate = base / candidate;
  candidate = candidate.lexically_normal();  // resolves "..", so a prefix test suffices
  if (std::mismatch(base.begin(), base.end(), candidate.begin(), candidate.end()).first != base.end()) {
    return absl::InvalidArgumentError(absl::StrCat("'", given, "' is outside ", root_key, " (", base.string(),
                                                   "); savepoints are written and read only there"));
  }
  // Again with symbolic links resolved (as far as the path exists): a link
  // inside the directory must not lead a client elsewhere.
  std::error_code ec;
  stdfs::path real_base = stdfs::weakly_canonical(base, ec);
  if (ec) real_base = base;
  const stdfs::path real_candidate = stdfs::weakly_canonical(candidate, ec);
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
  if (storage.remote() || weir::fs::IsObjectStoreUri(target)) {
    std::random_device random;
    std::string base = target;
    while (!base.empty() && base.back() == '/') base.pop_back();
    return WriteSavepointThroughFileSystems(
        storage, id, absl::StrCat(base, "/", absl::StrFormat("savepoint-%s-%06x", job_id, random() & 0xffffff)));
  }
  std::error_code ec;
  stdfs::create_directories(target, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", target, ": ", ec.message()));
  std::random_device random;
  const std::string path =
      absl::StrCat(target, "/", absl::StrFormat("savepoint-%s-%06x", job_id, random() & 0xffffff));
  const std::string from = storage.CheckpointDir(id);
  const std::string to = absl::StrCat(path, "/", stdfs::path(from).filename().string());
  stdfs::create_directories(to, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot create ", to, ": ", ec.message()));
  // Every file, in subdirectories too (RocksDB state), each fsynced.
  for (auto it = stdfs::recursive_directory_iterator(from, ec); !ec && it != stdfs::recursive_directory_iterator();
       it.increment(ec)) {
    const stdfs::path relative = stdfs::relative(it->path(), from, ec);
    if (ec) break;
    const stdfs::path dest = stdfs::path(to) / relative;
    if (it->is_directory()) {
      stdfs::create_directories(dest, ec);
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
        stdfs::create_directories(shared_to, ec);
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
  for (auto it = stdfs::recursive_directory_iterator(to, ec); !ec && it != stdfs::recursive_directory_iterator();
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
  absl::StatusOr<std::string> marker;
  if (weir::fs::IsObjectStoreUri(path)) {
    absl::StatusOr<weir::fs::ObjectStorePath> place = weir::fs::OpenObjectStorePath(path);
    marker = place.ok() ? place->fs->ReadFile(place->Child(kMarker), kMaxMarkerBytes) : place.status();
  } else {
    marker = io::ReadWholeFile(absl::StrCat(path, "/", kMarker));
  }
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

namespace {

// The three forms a restore path takes, shared by local directories and
// object-store URIs once the form is known.

RestorePoint FromSavepoint(const std::string& path, Savepoint savepoint) {
  RestorePoint point;
  point.path = path;
  point.checkpoint_dir = savepoint.storage.CheckpointDir(savepoint.metadata.checkpoint_id());
  point.metadata = std::move(savepoint.metadata);
  point.is_savepoint = true;
  return point;
}

// One retained checkpoint: <parent>/chk-<id>.
absl::StatusOr<RestorePoint> FromRetainedCheckpoint(const std::string& path, const std::string& parent,
                                                    int64_t id) {
  ASSIGN_OR_RETURN(CheckpointStorage storage, CheckpointStorage::OpenExisting(parent));
  absl::StatusOr<v1::CheckpointMetadata> metadata = storage.ReadMetadata(id);
  if (absl::IsNotFound(metadata.status())) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " in ", path,
                                            " never completed (it has no _metadata); restore a complete one"));
  }
  if (!metadata.ok()) return metadata.status();
  RETURN_IF_ERROR(storage.VerifyTaskFiles(*metadata));
  RestorePoint point;
  point.path = path;
  point.checkpoint_dir = storage.CheckpointDir(id);
  point.metadata = *std::move(metadata);
  return point;
}

// A job's checkpoint directory: its newest intact checkpoint.
absl::StatusOr<RestorePoint> FromNewestCheckpoint(const std::string& path, const CheckpointStorage& storage) {
  if (storage.ListCheckpointIds().empty()) {
    return absl::NotFoundError(absl::StrCat(path, " is neither a savepoint (no ", kMarker, " file) nor a checkpoint "
                                            "(chk-<n>) nor a job's checkpoint directory (no chk-<n> in it)"));
  }
  RestorePoint point;
  point.path = path;
  ASSIGN_OR_RETURN(std::optional<v1::CheckpointMetadata> latest, storage.LatestValid(&point.skipped));
  if (!latest.has_value()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", path, " is complete and intact",
                                            point.skipped.empty() ? "" : ": ", absl::StrJoin(point.skipped, "; ")));
  }
  point.checkpoint_dir = storage.CheckpointDir(latest->checkpoint_id());
  point.metadata = *std::move(latest);
  return point;
}

// ReadRestorePoint for an object-store URI: the same three forms.
absl::StatusOr<RestorePoint> ReadRemoteRestorePoint(const std::string& path) {
  ASSIGN_OR_RETURN(weir::fs::ObjectStorePath place, PlaceOf(path));
  ASSIGN_OR_RETURN(bool marked, place.fs->Exists(place.Child(kMarker)));
  std::string normal = path;
  while (!normal.empty() && normal.back() == '/') normal.pop_back();
  if (marked) {
    ASSIGN_OR_RETURN(Savepoint savepoint, ReadSavepoint(normal));
    return FromSavepoint(path, std::move(savepoint));
  }
  const auto [parent, last] = SplitLast(normal);
  if (std::optional<int64_t> id = ParseCheckpointDirName(last); id.has_value()) {
    return FromRetainedCheckpoint(path, std::string(parent), *id);
  }
  absl::StatusOr<CheckpointStorage> storage = CheckpointStorage::OpenExisting(normal);
  if (!storage.ok() && absl::IsNotFound(storage.status())) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist (nothing is stored under it)"));
  }
  if (!storage.ok()) return storage.status();
  return FromNewestCheckpoint(path, *storage);
}

}  // namespace

absl::StatusOr<RestorePoint> ReadRestorePoint(const std::string& path) {
  if (weir::fs::IsObjectStoreUri(path)) return ReadRemoteRestorePoint(path);
  std::error_code ec;
  if (stdfs::exists(absl::StrCat(path, "/", kMarker), ec)) {
    ASSIGN_OR_RETURN(Savepoint savepoint, ReadSavepoint(path));
    return FromSavepoint(path, std::move(savepoint));
  }
  if (!stdfs::is_directory(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, " does not exist (or is not a directory)"));
  }
  stdfs::path normal = stdfs::path(path).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "chk-3/" -> "chk-3"
  if (std::optional<int64_t> id = ParseCheckpointDirName(normal.filename().string()); id.has_value()) {
    return FromRetainedCheckpoint(path, normal.parent_path().string(), *id);
  }
  ASSIGN_OR_RETURN(CheckpointStorage storage, CheckpointStorage::OpenExisting(normal.string()));
  return FromNewestCheckpoint(path, storage);
}

}  // namespace weir::jobmanager::checkpoint
