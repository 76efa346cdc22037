// LocalStateDirectory: the directory where one TaskManager keeps the rocksdb
// backend's instances, owned by that process for its lifetime.
//
// Acquire takes an exclusive flock on <dir>/.lock (held until the object is
// destroyed) and removes whatever else is in the directory: instances left
// by a TaskManager that was killed. A directory whose lock is held by a live
// process is refused, so two TaskManagers never share one. It also sweeps
// the siblings named like the default (<parent>/weir-state-*) whose lock no
// live process holds and that are older than a minute (a starting
// TaskManager locks its own at once): those of killed TaskManagers with
// another resource id.
//
// Thread-safety: immutable after Acquire.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace weir::taskmanager {

class LocalStateDirectory {
 public:
  static absl::StatusOr<std::unique_ptr<LocalStateDirectory>> Acquire(const std::string& dir);
  ~LocalStateDirectory();  // releases the lock; the directory stays

  LocalStateDirectory(const LocalStateDirectory&) = delete;
  LocalStateDirectory& operator=(const LocalStateDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  LocalStateDirectory(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}

  const std::string path_;
  const int lock_fd_;
};

}  // namespace weir::taskmanager
