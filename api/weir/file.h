// An exactly-once file sink on the two-phase-commit API
// (weir/two_phase_commit.h): every transaction is one file.
//
//   stream.SinkTo("files", weir::file::ExactlyOnceFiles<std::string>(
//       {.directory = "/data/out"}, [](const std::string& s) { return s; }));
//
// Each record becomes one line (the format function's text and '\n'). A
// transaction writes the hidden in-progress file
//   <directory>/.part-<subtask>-<run>-<n>.inprogress
// (<run> is random per task start, so no name is ever reused); pre-commit
// flushes and fsyncs it; commit renames it to part-<subtask>-<run>-<n> and
// fsyncs the directory. Readers that skip names starting with '.' see only
// committed files, each whole.
//
// Commit is idempotent: a file already renamed is done. An in-progress file
// of a completed checkpoint that is missing fails the task (its records are
// lost). On start, the in-progress files of this subtask (and of the old
// subtasks it answers for after a rescale) that no restored committable
// names are deleted: they belong to checkpoints that never completed, and
// their records are written again from the restored source positions.
//
// One directory (or at least one prefix) per sink: two sinks writing one
// directory with one prefix delete each other's in-progress files on start.
// With TaskManagers on more than one host the directory must be on a file
// system they all share: a subtask restarted on another host must find the
// files its checkpoint names. Known leftovers: in-progress files of old
// subtasks beyond a lower new parallelism when the restored checkpoint
// listed none of theirs, and files a canceled attempt still wrote after the
// next one started, stay hidden until deleted by hand.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weir/two_phase_commit.h"

namespace weir::file {

struct FileSinkOptions {
  // Created if missing.
  std::string directory;
  // Committed files are <prefix>-<subtask>-<run>-<n>.
  std::string prefix = "part";
  // Bytes buffered before a write(2).
  size_t buffer_bytes = 64 << 10;
};

namespace internal {

[[noreturn]] inline void ThrowErrno(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

inline void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) ThrowErrno("opening the directory", dir);
  const int synced = ::fsync(fd);
  ::close(fd);
  if (synced != 0) ThrowErrno("syncing the directory", dir);
}

}  // namespace internal

// The sink; `Format` turns a record into its line (without '\n').
template <typename T>
class ExactlyOnceFileSink final : public TwoPhaseCommitSink<T, std::string> {
 public:
  using Format = std::function<std::string(const T&)>;

  ExactlyOnceFileSink(FileSinkOptions options, Format format)
      : options_(std::move(options)), format_(std::move(format)) {
    if (options_.directory.empty()) throw std::invalid_argument("ExactlyOnceFileSink: the directory is empty");
    if (options_.prefix.empty() || options_.prefix.find('/') != std::string::npos ||
        options_.prefix.find('-') != std::string::npos) {
      throw std::invalid_argument("ExactlyOnceFileSink: the prefix '" + options_.prefix +
                                  "' must be a non-empty file name without '/' or '-'");
    }
  }
  ~ExactlyOnceFileSink() override { CloseFile(); }

  void Open(const SinkContext& context) override {
    subtask_ = context.subtask_index;
    std::error_code ec;
    std::filesystem::create_directories(options_.directory, ec);
    if (ec) throw std::runtime_error("creating " + options_.directory + ": " + ec.message());
    std::random_device random;
    char run[17];
    std::snprintf(run, sizeof(run), "%08x%08x", random(), random());
    run_ = run;
  }

  void BeginTransaction() override {
    name_ = options_.prefix + "-" + std::to_string(subtask_) + "-" + run_ + "-" + std::to_string(next_++);
    const std::string path = InProgressPath(name_);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) internal::ThrowErrno("creating", path);
  }

  void Write(const T& record) override {
    buffer_ += format_(record);
    buffer_ += '\n';
    if (buffer_.size() >= options_.buffer_bytes) Flush();
  }

  std::string PreCommit(int64_t checkpoint_id) override {
    Flush();
    const std::string path = InProgressPath(name_);
    if (::fsync(fd_) != 0) internal::ThrowErrno("syncing", path);
    CloseFile();
    internal::SyncDirectory(options_.directory);  // the file's name is durable too
    return name_;
  }

  void Commit(const std::string& name) override { CommitFile(name, /*recovering=*/false); }

  // After a restore the file may have been committed long ago and consumed
  // since (moved or deleted by a reader, e.g. after weir stop): a missing
  // file is then taken as committed, with a warning, instead of failing
  // every restart.
  void CommitOnRecovery(const std::string& name) override { CommitFile(name, /*recovering=*/true); }

  void Abort() override {
    CloseFile();
    buffer_.clear();
    ::unlink(InProgressPath(name_).c_str());
  }

  void AbortLingering(int old_subtask, const std::vector<std::string>& restored) override {
    const std::set<std::string> keep(restored.begin(), restored.end());
    const std::string mine = "." + options_.prefix + "-" + std::to_string(old_subtask) + "-";
    std::error_code ec, first_error;
    for (std::filesystem::directory_iterator it(options_.directory, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      constexpr std::string_view kSuffix = ".inprogress";
      if (file.rfind(mine, 0) != 0 || file.size() <= mine.size() + kSuffix.size() ||
          file.compare(file.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
        continue;
      }
      const std::string name = file.substr(1, file.size() - 1 - kSuffix.size());
      std::error_code removed;
      if (keep.count(name) == 0) std::filesystem::remove(it->path(), removed);
      if (removed && !first_error) first_error = removed;
    }
    if (ec && !first_error) first_error = ec;
    if (first_error) throw std::runtime_error("cleaning " + options_.directory + ": " + first_error.message());
  }

  void Close() override { CloseFile(); }

 private:
  void CommitFile(const std::string& name, bool recovering) {
    const std::string from = InProgressPath(name), to = options_.directory + "/" + name;
    if (::rename(from.c_str(), to.c_str()) == 0) {
      internal::SyncDirectory(options_.directory);
      return;
    }
    const int rename_errno = errno;
    if (rename_errno != ENOENT) {
      errno = rename_errno;
      internal::ThrowErrno("committing", from);
    }
    if (::access(to.c_str(), F_OK) == 0) {
      // Committed before; the rename may not be durable yet.
      internal::SyncDirectory(options_.directory);
      return;
    }
    if (recovering) {
      std::fprintf(stderr, "ExactlyOnceFileSink: %s of the restored checkpoint is neither in progress nor "
                   "committed in %s; taking it as committed and consumed since\n", name.c_str(),
                   options_.directory.c_str());
      return;
    }
    throw UnrecoverableError("the file " + from + " of a completed checkpoint is gone: its records are lost "
                             "(was the directory cleaned, or shared with another sink?)");
  }

  std::string InProgressPath(const std::string& name) const {
    return options_.directory + "/." + name + ".inprogress";
  }

  void Flush() {
    size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) internal::ThrowErrno("writing", InProgressPath(name_));
      done += static_cast<size_t>(n);
    }
    buffer_.clear();
  }

  void CloseFile() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  const FileSinkOptions options_;
  const Format format_;
  int subtask_ = 0;
  std::string run_;
  int64_t next_ = 0;
  std::string name_;  // of the open transaction
  int fd_ = -1;
  std::string buffer_;
};

// A factory for DataStream::SinkTo.
template <typename T, typename F>
auto ExactlyOnceFiles(FileSinkOptions options, F format) {
  return [options = std::move(options), format = std::move(format)] {
    return std::make_unique<ExactlyOnceFileSink<T>>(options, format);
  };
}

}  // namespace weir::file
