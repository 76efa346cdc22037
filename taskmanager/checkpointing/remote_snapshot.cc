#include "taskmanager/checkpointing/remote_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/fs/file_system_registry.h"
#include "common/io/atomic_file.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"
#include "taskmanager/checkpointing/snapshot_file.h"

namespace weir::taskmanager {
namespace {

namespace stdfs = std::filesystem;

constexpr char kSharedDirName[] = "shared";
// Uploads of one snapshot in flight at once.
constexpr size_t kParallelUploads = 4;
// Read size of UploadPrefix.
constexpr int64_t kPrefixChunk = int64_t{8} << 20;

// A name a snapshot lists, used as one path segment.
absl::Status CheckPlainName(const std::string& name, absl::string_view what) {
  if (name.empty() || name.find('/') != std::string::npos || name[0] == '.') {
    return absl::DataLossError(absl::StrCat("the snapshot names the ", what, " '", name, "', which is not a plain name"));
  }
  return absl::OkStatus();
}

// The directory a URI or path names, and its parent.
std::string ParentOf(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? std::string() : dir.substr(0, slash);
}

std::string LastSegment(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

absl::Status MakeParent(const std::string& local_path) {
  std::error_code ec;
  stdfs::create_directories(stdfs::path(local_path).parent_path(), ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating the directory of ", local_path, ": ", ec.message()));
  return absl::OkStatus();
}

// Uploads the first `limit` bytes of `local` (a file still appended to).
absl::StatusOr<int64_t> UploadPrefix(fs::FileSystem& fs, const std::string& local, int64_t limit,
                                     const std::string& remote) {
  const int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io::ErrnoError("opening", local);
  absl::StatusOr<std::unique_ptr<fs::FileWriter>> writer = fs.NewWriter(remote, fs::WriteMode::kOverwrite);
  absl::Status status = writer.status();
  std::string buffer(static_cast<size_t>(std::min<int64_t>(limit, kPrefixChunk)), '\0');
  int64_t sent = 0;
  while (status.ok() && sent < limit) {
    const ssize_t n = ::read(fd, buffer.data(), static_cast<size_t>(std::min<int64_t>(limit - sent, buffer.size())));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = io::ErrnoError("reading", local);
    } else if (n == 0) {
      status = absl::DataLossError(absl::StrCat(local, " ended at ", sent, " of the ", limit, " bytes to upload"));
    } else {
      status = (*writer)->Append(absl::string_view(buffer.data(), static_cast<size_t>(n)));
      sent += n;
    }
  }
  ::close(fd);
  if (status.ok()) status = (*writer)->Close();
  if (!status.ok()) {
    if (writer.ok()) (void)(*writer)->Abort();
    return status;
  }
  return sent;
}

}  // namespace

std::string StagingCheckpointDir(const std::string& root, const std::string& task_id, int64_t checkpoint_id) {
  return absl::StrCat(root, "/upload/", task_id, "-c", checkpoint_id, "/job/chk-", checkpoint_id);
}

void RemoveStaging(const std::string& staged_dir) {
  const stdfs::path top = stdfs::path(staged_dir).parent_path().parent_path();
  if (top.empty()) return;
  std::error_code ec;
  stdfs::remove_all(top, ec);
}

absl::StatusOr<int64_t> UploadStagedSnapshot(const std::string& staged_dir, const std::string& remote_dir,
                                             const std::map<std::string, int64_t>& prefixes) {
  ASSIGN_OR_RETURN(fs::ObjectStorePath remote, fs::OpenObjectStorePath(remote_dir));
  ASSIGN_OR_RETURN(fs::ObjectStorePath remote_job, fs::OpenObjectStorePath(ParentOf(remote_dir)));
  struct Upload {
    std::string local, remote;
    int64_t size = 0;
    int64_t limit = -1;  // a prefix: this many bytes of it
  };
  std::vector<Upload> uploads;
  std::error_code ec;
  // The shared files have the checkpoint's id in their names (c<n>-...), so
  // nothing else writes them.
  const stdfs::path shared = stdfs::path(staged_dir).parent_path() / kSharedDirName;
  if (stdfs::is_directory(shared, ec)) {
    for (stdfs::directory_iterator it(shared, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_regular_file()) continue;
      const std::string name = it->path().filename().string();
      if (name.find(".tmp-") != std::string::npos) continue;  // a copy that never completed
      uploads.push_back({it->path().string(), remote_job.Child(absl::StrCat(kSharedDirName, "/", name))});
    }
    if (ec) return absl::UnavailableError(absl::StrCat("listing ", shared.string(), ": ", ec.message()));
  }
  for (stdfs::recursive_directory_iterator it(staged_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string relative = stdfs::relative(it->path(), staged_dir).generic_string();
    uploads.push_back({it->path().string(), remote.Child(relative)});
  }
  if (ec) return absl::UnavailableError(absl::StrCat("listing ", staged_dir, ": ", ec.message()));
  // The largest first, so that the small ones fill in beside them rather
  // than one large upload running alone at the end.
  for (Upload& upload : uploads) {
    auto prefix = prefixes.find(upload.local);
    if (prefix != prefixes.end()) {
      upload.limit = upload.size = prefix->second;
      continue;
    }
    std::error_code size_ec;
    upload.size = static_cast<int64_t>(stdfs::file_size(upload.local, size_ec));
  }
  std::stable_sort(uploads.begin(), uploads.end(), [](const Upload& a, const Upload& b) { return a.size > b.size; });

  // Several at once: each upload waits mostly on the store's answer. The
  // helpers live only for this call; the uploader thread takes a share.
  absl::Mutex mu;
  size_t next = 0;
  int64_t bytes = 0;
  absl::Status first_error;
  auto work = [&] {
    while (true) {
      size_t i;
      {
        absl::MutexLock lock(&mu);
        if (next == uploads.size() || !first_error.ok()) return;
        i = next++;
      }
      const absl::Time t0 = absl::Now();
      absl::StatusOr<int64_t> sent =
          uploads[i].limit >= 0
              ? UploadPrefix(*remote.fs, uploads[i].local, uploads[i].limit, uploads[i].remote)
              : remote.fs->UploadFile(uploads[i].local, uploads[i].remote, fs::WriteMode::kOverwrite);
      if (sent.ok()) {
        static const std::shared_ptr<spdlog::logger> log = logging::Get("task");
        log->debug("uploaded {} ({} bytes) in {} ms", uploads[i].remote, *sent,
                   absl::ToInt64Milliseconds(absl::Now() - t0));
      }
      absl::MutexLock lock(&mu);
      if (sent.ok()) {
        bytes += *sent;
      } else if (first_error.ok()) {
        first_error = Annotate(sent.status(), absl::StrCat("uploading ", uploads[i].local));
      }
    }
  };
  std::vector<std::thread> helpers;
  for (size_t h = 1; h < std::min(kParallelUploads, uploads.size()); ++h) helpers.emplace_back(work);
  work();
  for (std::thread& t : helpers) t.join();
  RETURN_IF_ERROR(first_error);
  return bytes;
}

absl::StatusOr<std::string> DownloadRestoreFiles(const v1::TaskDeploymentDescriptor& tdd, const std::string& root) {
  const std::string& remote_dir = tdd.restore_checkpoint_dir();
  ASSIGN_OR_RETURN(fs::ObjectStorePath remote, fs::OpenObjectStorePath(remote_dir));
  ASSIGN_OR_RETURN(fs::ObjectStorePath remote_job, fs::OpenObjectStorePath(ParentOf(remote_dir)));
  const std::string local = absl::StrCat(root, "/restore/", tdd.task_id(), "-a", tdd.attempt(), "/job/",
                                         LastSegment(remote_dir));
  RemoveStaging(local);  // an earlier try of this attempt
  const std::string local_shared = absl::StrCat(ParentOf(local), "/", kSharedDirName);
  auto download = [&](const std::string& from, const std::string& to) -> absl::Status {
    RETURN_IF_ERROR(MakeParent(to));
    absl::StatusOr<int64_t> got = remote.fs->DownloadFile(from, to);
    if (!got.ok()) return Annotate(got.status(), absl::StrCat("downloading the state to restore"));
    return absl::OkStatus();
  };
  std::set<std::string> shared_done;
  for (const v1::RestoreSource& source : tdd.restore_sources()) {
    for (const v1::TaskStateHandle& handle : source.handles()) {
      RETURN_IF_ERROR(CheckPlainName(handle.file(), "snapshot file"));
      RETURN_IF_ERROR(download(remote.Child(handle.file()), absl::StrCat(local, "/", handle.file())));
      // The snapshot file names the keyed state's files.
      ASSIGN_OR_RETURN(ChainSnapshot snapshot, ReadTaskSnapshot(local, handle));
      for (const OperatorSnapshot& op : snapshot.operators) {
        for (const KeyedStateRestore& part : op.keyed_restore) {
          if (!part.snapshot.has_keyed_files()) continue;
          const v1::KeyedStateFilesProto& files = part.snapshot.keyed_files();
          RETURN_IF_ERROR(CheckPlainName(files.directory(), "state directory"));
          for (const v1::StateFileProto& file : files.files()) {
            if (file.shared_name().empty()) {
              RETURN_IF_ERROR(CheckPlainName(file.name(), "state file"));
              RETURN_IF_ERROR(download(remote.Child(absl::StrCat(files.directory(), "/", file.name())),
                                       absl::StrCat(local, "/", files.directory(), "/", file.name())));
              continue;
            }
            RETURN_IF_ERROR(CheckPlainName(file.shared_name(), "shared state file"));
            if (!shared_done.insert(file.shared_name()).second) continue;
            RETURN_IF_ERROR(download(remote_job.Child(absl::StrCat(kSharedDirName, "/", file.shared_name())),
                                     absl::StrCat(local_shared, "/", file.shared_name())));
          }
        }
      }
    }
  }
  return local;
}

}  // namespace weir::taskmanager
