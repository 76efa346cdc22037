#include "common/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/durable_batch.h"
#include "common/status_macros.h"

namespace weir::io {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::UnavailableError(message);
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("opening directory", dir);
  const int rc = fsync(fd);
  absl::Status status = rc == 0 ? absl::OkStatus() : ErrnoError("syncing directory", dir);
  close(fd);
  return status;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  DurableBatch batch;
  RETURN_IF_ERROR(batch.WriteAtomically(path, contents));
  return batch.Sync();
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("writing", path);
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

namespace {

// Copies from the open `in` into the open `out` (see CopyFile). On failure
// `to` is unlinked; both descriptors stay open for the caller to close.
absl::StatusOr<int64_t> CopyInto(int in, int out, const std::string& from, const std::string& to, int64_t limit) {
  auto fail = [&](absl::Status status) {
    unlink(to.c_str());
    return status;
  };
  int64_t total = 0;
  bool kernel_copy = true;
  std::vector<char> buf;
  while (limit < 0 || total < limit) {
    const size_t want = limit < 0 ? size_t{1} << 30 : static_cast<size_t>(std::min<int64_t>(limit - total, 1 << 30));
    ssize_t n = -1;
    if (kernel_copy) {
      n = copy_file_range(in, nullptr, out, nullptr, want, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        kernel_copy = false;  // not between these file systems: copy through user space
        buf.resize(1 << 20);
        continue;
      }
    } else {
      n = read(in, buf.data(), std::min(buf.size(), want));
      if (n > 0) {
        absl::Status written = WriteAll(out, absl::string_view(buf.data(), static_cast<size_t>(n)), to);
        if (!written.ok()) return fail(std::move(written));
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrnoError(kernel_copy ? "copying into" : "reading", kernel_copy ? to : from));
    }
    if (n == 0) break;
    total += n;
  }
  if (limit >= 0 && total < limit) {
    return fail(absl::DataLossError(absl::StrCat(from, " has ", total, " bytes, ", limit, " were expected")));
  }
  return total;
}

}  // namespace

absl::StatusOr<int64_t> CopyFileInto(const std::string& from, const std::string& to, int out, int64_t limit) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    absl::Status status = ErrnoError("opening", from);
    unlink(to.c_str());
    return status;
  }
  absl::StatusOr<int64_t> copied = CopyInto(in, out, from, to, limit);
  close(in);
  return copied;
}

namespace {

absl::StatusOr<int64_t> CopyWhole(const std::string& from, const std::string& to, int64_t limit, bool sync) {
  const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (out < 0) return ErrnoError("creating", to);
  absl::StatusOr<int64_t> copied = CopyFileInto(from, to, out, limit);
  if (copied.ok() && sync && fsync(out) != 0) {
    copied = ErrnoError("syncing", to);
    unlink(to.c_str());
  }
  if (close(out) != 0 && copied.ok()) {
    copied = ErrnoError("closing", to);
    unlink(to.c_str());
  }
  return copied;
}

}  // namespace

absl::StatusOr<int64_t> CopyFile(const std::string& from, const std::string& to, int64_t limit) {
  return CopyWhole(from, to, limit, /*sync=*/false);
}

absl::StatusOr<int64_t> CopyFileDurably(const std::string& from, const std::string& to, int64_t limit) {
  return CopyWhole(from, to, limit, /*sync=*/true);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rbe");
  if (f == nullptr) return ErrnoError("opening", path);
  std::string out;
  char buf[64 * 1024];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::UnavailableError(absl::StrCat("reading ", path, ": read error"));
  return out;
}

}  // namespace weir::io
