// A directory only this process's user may use: for what the process later
// loads or trusts (job binaries, local state), which another local user must
// not be able to plant, swap or read.
//
// Thread-safety: thread-safe (no shared state).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weir::io {

// Creates `dir` (mode 0700) when missing, then checks that it is a real
// directory (not a symbolic link or a file) owned by this process's
// effective user, and takes away any access of group and others.
// kFailedPrecondition saying what is wrong and naming `config_key`, the key
// that points there; kUnavailable when the system refuses.
absl::Status EnsurePrivateDirectory(const std::string& dir, absl::string_view config_key);

}  // namespace weir::io
