// The `weir` command-line client: parses the command line and runs one
// command against the JobManager. Kept apart from main.cc so that tests can
// call it in-process.
//
// Output: human-readable text on stdout, or JSON with --json; errors go to
// stderr as one line starting with "weir: ". Exit codes: 0 success, 1 the
// command failed (e.g. JobManager unreachable), 2 bad usage.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::client {

// The options every command takes.
struct GlobalOptions {
  std::string jobmanager;  // HOST:PORT
  std::string token_file;
  bool json = false;
  bool version = false;
};

// If args[*i] is a global option (--jobmanager/-m, --token-file, as
// "--name VALUE" or "--name=VALUE"; --json; --version), applies it, moves *i
// past its value and returns true; false for anything else;
// kInvalidArgument for a value that is missing.
absl::StatusOr<bool> ParseGlobalOption(const std::vector<std::string>& args, size_t* i, GlobalOptions* options);

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace weir::client
