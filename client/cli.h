// The `weir` command-line client: parses the command line and runs one
// command against the JobManager. Kept apart from main.cc so that tests can
// call it in-process.
//
// Output: human-readable text on stdout, or JSON with --json; errors go to
// stderr as one line starting with "weir: ", or with --json as one JSON
// object {"error": "...", "exit_code": N}. Exit codes: 0 success, 1 the
// command failed (e.g. JobManager unreachable), 2 bad usage.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc/tls.h"

namespace weir::client {

// The options every command takes.
struct GlobalOptions {
  std::string jobmanager;  // HOST:PORT
  std::string token_file;
  // --config FILE: the cluster's configuration file, for the JobManager's
  // address and the token file when not given otherwise.
  std::string config_file;
  // -Dkey=value before the command: override the file's values.
  std::vector<std::string> overrides;
  // Given by an option or the environment ($WEIR_JOBMANAGER,
  // $WEIR_AUTH_TOKEN_FILE): the configuration file does not override them.
  bool jobmanager_given = false;
  bool token_file_given = false;
  bool json = false;
  bool version = false;
  // security.ssl.internal.* from the configuration file and -D (checked).
  rpc::InternalTls tls;
};

// If args[*i] is a global option (--jobmanager/-m, --token-file, --config, as
// "--name VALUE" or "--name=VALUE"; --json; --version), applies it, moves *i
// past its value and returns true; false for anything else;
// kInvalidArgument for a value that is missing.
absl::StatusOr<bool> ParseGlobalOption(const std::vector<std::string>& args, size_t* i, GlobalOptions* options);

// Fills in the JobManager's address and the token file from the
// configuration file (--config, else $WEIR_CONFIG_FILE, else
// /etc/weir/weir.yaml if it exists) where neither an option nor the
// environment gave them. kInvalidArgument for a file that cannot be read.
absl::Status ApplyConfigFile(GlobalOptions* options);

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace weir::client
