// Random identifiers (job ids, JobManager session ids, TaskManager ids).
#pragma once

#include <random>
#include <string>

#include "absl/strings/str_format.h"

namespace weir {

// `prefix` followed by 16 random lowercase hex digits.
inline std::string RandomId(const std::string& prefix = "") {
  std::random_device rd;
  return absl::StrFormat("%s%08x%08x", prefix, rd(), rd());
}

// Whether `id` could be one of ours: 1..64 characters of [A-Za-z0-9_-]. Ids
// name files and directories, so anything else (a '/', "..") is refused.
inline bool IsSafeId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace weir
