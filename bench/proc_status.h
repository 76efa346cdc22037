// Readings of another process from /proc, for the benchmarks that sample the
// daemons they start.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace weir::bench {

// A number field of /proc/<pid>/status, by name without the colon ("Threads",
// "VmRSS" in kB), or -1 when the process or the field is not there.
inline int64_t ProcStatusField(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::string text = line.substr(field.size() + 1);
    text.erase(0, text.find_first_not_of(" \t"));
    text = text.substr(0, text.find_first_of(" \t"));
    int64_t value = -1;
    return absl::SimpleAtoi(text, &value) ? value : -1;
  }
  return -1;
}

}  // namespace weir::bench
