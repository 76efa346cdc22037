#include "common/io/durable_batch.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/io/atomic_file.h"
#include "common/status_macros.h"

namespace weir::io {
namespace {

std::string ParentOf(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

int Create(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
}

}  // namespace

DurableBatch::~DurableBatch() {
  for (File& file : open_) {
    close(file.fd);
    if (!file.final.empty()) unlink(file.path.c_str());
  }
  for (File& file : to_rename_) unlink(file.path.c_str());
}

absl::StatusOr<std::optional<int64_t>> DurableBatch::Link(const std::string& from, const std::string& to,
                                                          int64_t limit) {
  if (link(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST && unlink(to.c_str()) == 0 && link(from.c_str(), to.c_str()) == 0) {
      // an earlier try's file of the same name, replaced
    } else if (errno == EXDEV || errno == EPERM || errno == EMLINK || errno == EOPNOTSUPP) {
      return std::optional<int64_t>();
    } else {
      return ErrnoError(absl::StrCat("linking ", from, " as"), to);
    }
  }
  struct stat st;
  if (stat(to.c_str(), &st) != 0) return ErrnoError("reading the size of", to);
  if (limit < 0) return std::optional<int64_t>(static_cast<int64_t>(st.st_size));
  if (st.st_size < limit) {
    unlink(to.c_str());
    return absl::DataLossError(absl::StrCat(from, " has ", st.st_size, " bytes, ", limit, " were expected"));
  }
  linked_prefixes_[to] = limit;
  return std::optional<int64_t>(limit);
}

absl::StatusOr<int64_t> DurableBatch::Copy(const std::string& from, const std::string& to, int64_t limit) {
  if (!early_.ok()) return early_;  // the batch has failed: Sync says so
  if (!durable_) {
    ASSIGN_OR_RETURN(std::optional<int64_t> linked, Link(from, to, limit));
    if (linked.has_value()) return *linked;
  }
  const int fd = Create(to);
  if (fd < 0) return ErrnoError("creating", to);
  absl::StatusOr<int64_t> copied = CopyFileInto(from, to, fd, limit);
  if (!copied.ok()) {
    close(fd);
    return copied;
  }
  Keep(File{fd, to, ""});
  return copied;
}

absl::StatusOr<int64_t> DurableBatch::CopyThenRename(const std::string& from, const std::string& temp,
                                                     const std::string& final_path) {
  if (!early_.ok()) return early_;  // the batch has failed: Sync says so
  if (!durable_) {
    // Nobody else writes a staging directory: the final name at once.
    ASSIGN_OR_RETURN(std::optional<int64_t> linked, Link(from, final_path, -1));
    if (linked.has_value()) return *linked;
  }
  const int fd = Create(temp);
  if (fd < 0) return ErrnoError("creating", temp);
  absl::StatusOr<int64_t> copied = CopyFileInto(from, temp, fd, -1);
  if (!copied.ok()) {
    close(fd);
    return copied;
  }
  Keep(File{fd, temp, final_path});
  return copied;
}

absl::Status DurableBatch::WriteAtomically(const std::string& path, absl::string_view contents) {
  if (!early_.ok()) return early_;  // the batch has failed: Sync says so
  const std::string temp = path + ".tmp";
  const int fd = Create(temp);
  if (fd < 0) return ErrnoError("creating", temp);
  if (absl::Status written = WriteAll(fd, contents, temp); !written.ok()) {
    close(fd);
    unlink(temp.c_str());
    return written;
  }
  Keep(File{fd, temp, path});
  return absl::OkStatus();
}

void DurableBatch::SyncDirectoryAtEnd(const std::string& dir) { directories_.insert(dir); }

void DurableBatch::Keep(File file) {
  // Only starts the write-back (no wait); where it is not supported, the
  // fsync in Sync does all of it.
  if (durable_) sync_file_range(file.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  directories_.insert(ParentOf(file.path));
  open_.push_back(std::move(file));
  if (open_.size() <= kMaxOpenFiles) return;
  absl::Status finished = Finish(open_.front());
  open_.pop_front();
  if (early_.ok()) early_ = std::move(finished);
}

absl::Status DurableBatch::Finish(File& file) {
  absl::Status status;
  if (durable_) {
    ++fsyncs_;
    if (fsync(file.fd) != 0) status = ErrnoError("syncing", file.path);
  }
  if (close(file.fd) != 0 && status.ok()) status = ErrnoError("closing", file.path);
  file.fd = -1;
  if (file.final.empty()) return status;
  if (!status.ok()) {
    unlink(file.path.c_str());
    return status;
  }
  to_rename_.push_back(std::move(file));
  return status;
}

absl::Status DurableBatch::Sync() {
  absl::Status status = std::exchange(early_, absl::OkStatus());
  for (File& file : open_) {
    if (status.ok()) {
      status = Finish(file);
      continue;
    }
    close(file.fd);
    if (!file.final.empty()) unlink(file.path.c_str());
  }
  open_.clear();
  for (File& file : to_rename_) {
    if (status.ok() && std::rename(file.path.c_str(), file.final.c_str()) != 0) {
      status = ErrnoError("renaming into place", file.final);
    }
    if (status.ok()) {
      directories_.insert(ParentOf(file.final));
    } else {
      unlink(file.path.c_str());
    }
  }
  to_rename_.clear();
  std::set<std::string> directories = std::exchange(directories_, {});
  if (!status.ok() || !durable_) return status;
  for (const std::string& dir : directories) {
    ++fsyncs_;
    RETURN_IF_ERROR(SyncDirectory(dir));
  }
  return absl::OkStatus();
}

}  // namespace weir::io
