// The `weir` command-line client: parses the command line and runs one
// command against the JobManager. Kept apart from main.cc so that tests can
// call it in-process.
//
// Output: human-readable text on stdout, or JSON with --json; errors go to
// stderr as one line starting with "weir: ". Exit codes: 0 success, 1 the
// command failed (e.g. JobManager unreachable), 2 bad usage.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace weir::client {

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace weir::client
