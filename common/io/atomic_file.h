// Durable whole-file writes: a reader sees the old file or the complete new
// one, never a part, and a completed write survives a crash.
//
// Thread-safety: thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weir::io {

// Writes `contents` to `path` + ".tmp", fsyncs it, renames it over `path`
// and fsyncs the directory. Errors name the file and the system's reason.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The whole file; kNotFound when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Copies `from` to `to` (created or truncated) in the kernel where it can,
// and fsyncs `to`; the caller syncs the directory. Returns the bytes copied.
// limit >= 0: only the first `limit` bytes (of a file still being appended
// to), and kDataLoss if `from` is shorter.
absl::StatusOr<int64_t> CopyFileDurably(const std::string& from, const std::string& to, int64_t limit = -1);

// The same without the fsync: for scratch copies that need no durability
// (a local RocksDB instance, a local recovery copy).
absl::StatusOr<int64_t> CopyFile(const std::string& from, const std::string& to, int64_t limit = -1);

// The copy itself, into `out`, an open descriptor of `to` (named in errors;
// unlinked on failure). `out` stays open.
absl::StatusOr<int64_t> CopyFileInto(const std::string& from, const std::string& to, int out, int64_t limit = -1);

// Writes all of `bytes` to `fd` (retrying interrupted writes); errors name
// `path`.
absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path);

// The status for a failed system call on `path`, from errno: "<what>
// <path>: <reason>", kNotFound for ENOENT, kPermissionDenied for EACCES and
// EPERM, kUnavailable otherwise.
absl::Status ErrnoError(absl::string_view what, const std::string& path);

// fsyncs the directory `dir` (makes a rename or create in it durable).
absl::Status SyncDirectory(const std::string& dir);

}  // namespace weir::io
