#include "taskmanager/state/local_state_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/private_directory.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"

namespace weir::taskmanager {
namespace {

namespace fs = std::filesystem;

constexpr char kLockFile[] = ".lock";
constexpr char kDefaultPrefix[] = "weir-state-";

// An fd holding the exclusive lock on `dir`'s lock file, or -1 when another
// process holds it (errno EWOULDBLOCK) or it cannot be opened.
int TryLock(const fs::path& dir) {
  const std::string lock = (dir / kLockFile).string();
  const int fd = open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return -1;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

// Whether `fd` is still the file at `dir`'s lock file path (a sweeping
// TaskManager may have unlinked it).
bool StillLinked(int fd, const fs::path& dir) {
  struct stat held, linked;
  return fstat(fd, &held) == 0 && stat((dir / kLockFile).c_str(), &linked) == 0 && held.st_ino == linked.st_ino &&
         held.st_dev == linked.st_dev;
}

// Removes `dir`'s contents except the lock file.
void Clear(const fs::path& dir) {
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename() == kLockFile) continue;
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalStateDirectory>> LocalStateDirectory::Acquire(const std::string& dir) {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("state");
  const fs::path path(dir);
  std::error_code ec;
  // Another TaskManager starting at the same moment may be sweeping this
  // directory as a dead one's (below): it holds the lock for a moment and may
  // delete the lock file and the directory. Retry briefly, and only count a
  // lock on the lock file that is still there.
  int fd = -1;
  int lock_errno = 0;  // of the last try: EWOULDBLOCK and ENOENT may pass
  const retry::RetryOutcome outcome = retry::Retry(
      {.backoff = {.initial = absl::Milliseconds(20), .multiplier = 1, .max = absl::Milliseconds(20)},
       .deadline = absl::Now() + absl::Seconds(1)},
      [&]() -> absl::Status {
        lock_errno = 0;
        fs::create_directories(path, ec);
        if (ec) {
          return absl::FailedPreconditionError(absl::StrCat("cannot create the local state directory ", dir, ": ",
                                                            ec.message(), " (taskmanager.state.local.root-dirs)"));
        }
        // The state of running jobs lives there, and RocksDB opens what it
        // finds: only this user's, closed to everyone else.
        if (absl::Status private_dir = io::EnsurePrivateDirectory(dir, "taskmanager.state.local.root-dirs");
            !private_dir.ok()) {
          return private_dir;
        }
        fd = TryLock(path);
        if (fd >= 0 && StillLinked(fd, path)) return absl::OkStatus();
        lock_errno = fd >= 0 ? ENOENT : errno;
        if (fd >= 0) close(fd);
        fd = -1;
        if (lock_errno == EWOULDBLOCK) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the local state directory ", dir, " is in use by another running TaskManager; give each "
              "TaskManager its own taskmanager.state.local.root-dirs"));
        }
        return absl::FailedPreconditionError(
            absl::StrCat("cannot lock the local state directory ", dir, ": ", std::strerror(lock_errno)));
      },
      [&](const absl::Status&) { return lock_errno == EWOULDBLOCK || lock_errno == ENOENT; });
  if (!outcome.status.ok()) return outcome.status;
  Clear(path);
  // Leftovers of killed TaskManagers that used the default layout.
  const fs::path parent = path.parent_path();
  for (const fs::directory_entry& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, kDefaultPrefix) || entry.path() == path || !entry.is_directory(ec)) continue;
    // A directory made moments ago may belong to a TaskManager that is
    // starting and has not locked it yet.
    const auto age = fs::file_time_type::clock::now() - entry.last_write_time(ec);
    if (ec || age < std::chrono::minutes(1)) continue;
    const int other = TryLock(entry.path());
    if (other < 0) continue;  // a live TaskManager's, or not ours to judge
    Clear(entry.path());
    fs::remove(entry.path() / kLockFile, ec);
    close(other);
    fs::remove(entry.path(), ec);
    log->info("removed the local state of a TaskManager that is gone: {}", entry.path().string());
  }
  return std::unique_ptr<LocalStateDirectory>(new LocalStateDirectory(dir, fd));
}

LocalStateDirectory::~LocalStateDirectory() { close(lock_fd_); }

}  // namespace weir::taskmanager
