// Test helpers that start real Weir processes: Subprocess (fork/exec with
// output captured to a file, killed with any signal) and FreePort.
//
// Thread-safety: none; use from the test's thread.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace weir::testing {

// A port on 127.0.0.1 that was free a moment ago, outside the kernel's
// ephemeral range so that processes binding port 0 cannot take it first.
int FreePort();

// Directory of the built binaries (<build>/bin).
std::string BinDir();

// A fresh temporary directory, removed by the caller if it wants.
std::string MakeTempDir(const std::string& prefix);

std::string ReadFile(const std::string& path);

// Polls `condition` until it holds or `timeout` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout,
             absl::Duration poll = absl::Milliseconds(50));

class Subprocess {
 public:
  // Starts `argv[0]` (a path) with stdout and stderr appended to `log_path`.
  Subprocess(std::vector<std::string> argv, std::string log_path);
  ~Subprocess();  // SIGKILLs the process if still running.

  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const;

  // Sends `sig` while the process runs; a no-op once it has ended. (Once
  // reaped, its pid may belong to another test's process: the signal would
  // hit that one. Unreaped, an ended process holds its pid as a zombie.)
  void Signal(int sig);
  // Waits for exit; returns the exit code, or 128+signal, or nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);
  bool running();

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> exit_code_;
};

// Runs a command to completion; returns its exit code and stdout (stderr goes
// to `stderr_out` when given).
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout = absl::Seconds(60));

}  // namespace weir::testing
