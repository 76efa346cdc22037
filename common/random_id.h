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

}  // namespace weir
