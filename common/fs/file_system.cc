#include "common/fs/file_system.h"

#include <fcntl.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::fs {
namespace {
constexpr int64_t kCopyChunk = 8 << 20;
}  // namespace

absl::Status ValidatePath(absl::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("an empty path");
  if (path.size() > 1024) return absl::InvalidArgumentError(absl::StrCat("a path longer than 1024 bytes: ", path.substr(0, 64), "..."));
  for (absl::string_view segment : absl::StrSplit(path, '/')) {
    if (segment.empty() || segment == "." || segment == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("path '", path, "' is not relative or has an empty, '.' or '..' segment"));
    }
  }
  for (char c : path) {
    if (c == '\0' || c == '\n' || c == '\r') {
      return absl::InvalidArgumentError(absl::StrCat("path '", path, "' holds a control character"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FileSystem::UploadFile(const std::string& local_path, absl::string_view path, WriteMode mode) {
  int fd = ::open(local_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io::ErrnoError("opening", local_path);
  absl::StatusOr<std::unique_ptr<FileWriter>> writer = NewWriter(path, mode);
  if (!writer.ok()) {
    ::close(fd);
    return writer.status();
  }
  std::string buffer(kCopyChunk, '\0');
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      absl::Status status = io::ErrnoError("reading", local_path);
      ::close(fd);
      (void)(*writer)->Abort();
      return status;
    }
    if (n == 0) break;
    if (absl::Status s = (*writer)->Append(absl::string_view(buffer.data(), static_cast<size_t>(n))); !s.ok()) {
      ::close(fd);
      (void)(*writer)->Abort();
      return s;
    }
  }
  ::close(fd);
  RETURN_IF_ERROR((*writer)->Close());
  return (*writer)->bytes_written();
}

absl::StatusOr<int64_t> FileSystem::DownloadFile(absl::string_view path, const std::string& local_path) {
  ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  int fd = ::open(local_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io::ErrnoError("creating", local_path);
  int64_t offset = 0;
  while (offset < info.size) {
    absl::StatusOr<std::string> chunk = ReadRange(path, offset, std::min(kCopyChunk, info.size - offset));
    absl::Status status = chunk.status();
    if (status.ok() && chunk->empty()) {
      status = absl::DataLossError(absl::StrCat(path, " ended at ", offset, " of ", info.size, " bytes"));
    }
    if (status.ok()) status = io::WriteAll(fd, *chunk, local_path);
    if (!status.ok()) {
      ::close(fd);
      ::unlink(local_path.c_str());
      return status;
    }
    offset += static_cast<int64_t>(chunk->size());
  }
  absl::Status status;
  if (::fsync(fd) != 0) status = io::ErrnoError("fsyncing", local_path);
  ::close(fd);
  RETURN_IF_ERROR(status);
  return offset;
}

absl::StatusOr<bool> FileSystem::Exists(absl::string_view path) {
  absl::StatusOr<FileInfo> info = Stat(path);
  if (info.ok()) return true;
  if (absl::IsNotFound(info.status())) return false;
  return info.status();
}

absl::Status FileSystem::DeleteMany(const std::vector<std::string>& paths) {
  absl::Status first;
  int failed = 0;
  for (const std::string& path : paths) {
    absl::Status s = Delete(path);
    if (!s.ok()) {
      ++failed;
      if (first.ok()) first = s;
    }
  }
  if (failed == 0) return absl::OkStatus();
  return Annotate(first, absl::StrCat(failed, " of ", paths.size(), " deletes failed; the first"));
}

}  // namespace weir::fs
