#include "common/fs/local_file_system.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/atomic_file.h"
#include "common/random_id.h"
#include "common/status_macros.h"

namespace weir::fs {
namespace {

constexpr absl::string_view kTempMarker = ".weir-tmp-";

std::string Parent(const std::string& path) { return std::filesystem::path(path).parent_path().string(); }

absl::Status MakeDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("creating directory ", dir, ": ", ec.message()));
  return absl::OkStatus();
}

std::string TempPathFor(const std::string& full) {
  std::filesystem::path p(full);
  return (p.parent_path() / absl::StrCat(".", p.filename().string(), kTempMarker, RandomId())).string();
}

// Moves the fsynced `temp` to `full` by `mode`, then syncs the directory.
// `temp` is gone afterwards, whatever happened.
absl::Status Publish(const std::string& temp, const std::string& full, WriteMode mode) {
  if (mode == WriteMode::kOverwrite) {
    if (::rename(temp.c_str(), full.c_str()) != 0) {
      absl::Status status = io::ErrnoError("renaming into place", full);
      ::unlink(temp.c_str());
      return status;
    }
  } else {
    // link(2) never replaces: the one atomic "create unless it exists" for a
    // whole file on POSIX.
    int rc = ::link(temp.c_str(), full.c_str());
    int err = errno;
    ::unlink(temp.c_str());
    if (rc != 0) {
      if (err == EEXIST) return absl::AlreadyExistsError(absl::StrCat(full, " already exists; it is never overwritten"));
      errno = err;
      return io::ErrnoError("linking into place", full);
    }
  }
  return io::SyncDirectory(Parent(full));
}

class LocalFileWriter final : public FileWriter {
 public:
  LocalFileWriter(std::string full, std::string temp, int fd, WriteMode mode)
      : full_(std::move(full)), temp_(std::move(temp)), fd_(fd), mode_(mode) {}
  ~LocalFileWriter() override { (void)Abort(); }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("writer of ", full_, " is closed"));
    RETURN_IF_ERROR(io::WriteAll(fd_, data, temp_));
    written_ += static_cast<int64_t>(data.size());
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat("writer of ", full_, " is closed"));
    absl::Status status;
    if (::fsync(fd_) != 0) status = io::ErrnoError("fsyncing", temp_);
    ::close(fd_);
    fd_ = -1;
    if (!status.ok()) {
      ::unlink(temp_.c_str());
      return status;
    }
    return Publish(temp_, full_, mode_);
  }

  absl::Status Abort() override {
    if (fd_ < 0) return absl::OkStatus();
    ::close(fd_);
    fd_ = -1;
    ::unlink(temp_.c_str());
    return absl::OkStatus();
  }

  int64_t bytes_written() const override { return written_; }

 private:
  const std::string full_;
  const std::string temp_;
  int fd_;
  const WriteMode mode_;
  int64_t written_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LocalFileSystem>> LocalFileSystem::Open(const std::string& root) {
  if (root.empty() || root.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat("a local file system root must be an absolute path, not '", root, "'"));
  }
  std::string normal = std::filesystem::path(root).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return std::unique_ptr<LocalFileSystem>(new LocalFileSystem(normal));
}

absl::StatusOr<std::string> LocalFileSystem::LocalPath(absl::string_view path) const {
  RETURN_IF_ERROR(ValidatePath(path));
  return absl::StrCat(root_ == "/" ? "" : root_, "/", path);
}

absl::Status LocalFileSystem::Write(absl::string_view path, absl::string_view contents, WriteMode mode) {
  ASSIGN_OR_RETURN(std::unique_ptr<FileWriter> writer, NewWriter(path, mode));
  RETURN_IF_ERROR(writer->Append(contents));
  return writer->Close();
}

absl::StatusOr<std::unique_ptr<FileWriter>> LocalFileSystem::NewWriter(absl::string_view path, WriteMode mode) {
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  RETURN_IF_ERROR(MakeDirectories(Parent(full)));
  std::string temp = TempPathFor(full);
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return io::ErrnoError("creating", temp);
  return std::unique_ptr<FileWriter>(new LocalFileWriter(std::move(full), std::move(temp), fd, mode));
}

absl::StatusOr<int64_t> LocalFileSystem::UploadFile(const std::string& local_path, absl::string_view path,
                                                    WriteMode mode) {
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  RETURN_IF_ERROR(MakeDirectories(Parent(full)));
  std::string temp = TempPathFor(full);
  absl::StatusOr<int64_t> copied = io::CopyFileDurably(local_path, temp);
  if (!copied.ok()) {
    ::unlink(temp.c_str());
    return copied.status();
  }
  RETURN_IF_ERROR(Publish(temp, full, mode));
  return *copied;
}

absl::StatusOr<std::string> LocalFileSystem::ReadFile(absl::string_view path, int64_t max_bytes) {
  ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  if (info.size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(root_, "/", path, " holds ", info.size,
                                                     " bytes, more than the ", max_bytes, " expected"));
  }
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  ASSIGN_OR_RETURN(std::string contents, io::ReadWholeFile(full));
  if (static_cast<int64_t>(contents.size()) > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(full, " grew past ", max_bytes, " bytes while being read"));
  }
  return contents;
}

absl::StatusOr<std::string> LocalFileSystem::ReadRange(absl::string_view path, int64_t offset, int64_t length) {
  if (offset < 0 || length < 0) return absl::InvalidArgumentError("a range needs offset >= 0 and length >= 0");
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io::ErrnoError("opening", full);
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = io::ErrnoError("stat of", full);
    ::close(fd);
    return status;
  }
  int64_t end = std::min<int64_t>(st.st_size, offset + length);
  if (end > offset) out.resize(end - offset);
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, offset + static_cast<int64_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status = n < 0 ? io::ErrnoError("reading", full)
                                  : absl::DataLossError(absl::StrCat(full, " shrank while being read"));
      ::close(fd);
      return status;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

absl::StatusOr<int64_t> LocalFileSystem::DownloadFile(absl::string_view path, const std::string& local_path) {
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  return io::CopyFileDurably(full, local_path);
}

absl::StatusOr<FileInfo> LocalFileSystem::Stat(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  struct stat st;
  if (::stat(full.c_str(), &st) != 0) return io::ErrnoError("stat of", full);
  if (!S_ISREG(st.st_mode)) return absl::NotFoundError(absl::StrCat(full, " is not a regular file"));
  return FileInfo{std::string(path), static_cast<int64_t>(st.st_size)};
}

absl::StatusOr<std::vector<FileInfo>> LocalFileSystem::List(absl::string_view prefix) {
  if (!prefix.empty()) {
    // The prefix's directory part must be a valid path; its last segment may be partial.
    absl::string_view dir = prefix;
    if (dir.back() == '/') dir.remove_suffix(1);
    RETURN_IF_ERROR(ValidatePath(dir));
  }
  size_t slash = prefix.rfind('/');
  std::string start = slash == absl::string_view::npos ? root_ : absl::StrCat(root_, "/", prefix.substr(0, slash));
  std::vector<FileInfo> out;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(start, ec), end;
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    return absl::UnavailableError(absl::StrCat("listing ", start, ": ", ec.message()));
  }
  const size_t root_len = root_ == "/" ? 1 : root_.size() + 1;
  for (; it != end; it.increment(ec)) {
    if (ec) return absl::UnavailableError(absl::StrCat("listing ", start, ": ", ec.message()));
    if (!it->is_regular_file(ec)) continue;
    std::string full = it->path().string();
    if (absl::StrContains(it->path().filename().string(), kTempMarker)) continue;
    std::string relative = full.substr(root_len);
    if (!absl::StartsWith(relative, prefix)) continue;
    std::error_code size_ec;
    auto size = it->file_size(size_ec);
    if (size_ec) continue;  // deleted meanwhile
    out.push_back(FileInfo{std::move(relative), static_cast<int64_t>(size)});
  }
  std::sort(out.begin(), out.end(), [](const FileInfo& a, const FileInfo& b) { return a.path < b.path; });
  return out;
}

absl::Status LocalFileSystem::Delete(absl::string_view path) {
  ASSIGN_OR_RETURN(std::string full, LocalPath(path));
  if (::unlink(full.c_str()) != 0 && errno != ENOENT) return io::ErrnoError("deleting", full);
  return absl::OkStatus();
}

}  // namespace weir::fs
