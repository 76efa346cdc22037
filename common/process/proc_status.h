// Readings of a process from /proc/<pid>/status: what the daemons log about
// their own memory, and what the benchmarks and tests sample of the daemons
// they start. Header-only, for the test and bench tools that do not link
// weir_common.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace weir::process {

// A number field of /proc/<pid>/status by name, without the colon
// ("Threads"; "VmRSS", "RssFile" in kB), of this process when pid is 0;
// -1 when the process or the field is not there.
inline int64_t ProcStatusField(pid_t pid, absl::string_view field) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status") : absl::StrCat("/proc/", pid, "/status"));
  const std::string prefix = absl::StrCat(field, ":");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    absl::string_view text = absl::string_view(line).substr(prefix.size());
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    text = text.substr(0, text.find_first_of(" \t"));
    int64_t value = -1;
    return absl::SimpleAtoi(text, &value) ? value : -1;
  }
  return -1;
}

}  // namespace weir::process
