// The shared main() of Weir's daemons: --help/--version/--print-config-reference,
// configuration from --config and -D (exit code 2 on any error, naming the
// key), logging set-up, the effective configuration in the log, and an orderly
// shutdown on SIGTERM/SIGINT.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/config/configuration.h"

namespace weir::process {

// Started daemon; called with the reason when a termination signal arrives.
using ShutdownFn = std::function<void(const std::string& reason)>;

// What a started daemon tells DaemonMain (and through it systemd, see
// systemd_notify.h).
struct StartedDaemon {
  ShutdownFn shutdown;
  // True once the daemon does what it is for (serves; is registered):
  // systemd's READY=1. Null: ready at once.
  std::function<bool()> ready;
  // False while one of its main loops is stuck: the systemd watchdog is
  // then no longer fed. Null: always alive.
  std::function<bool()> alive;
  // A one-line status for `systemctl status`.
  std::function<std::string()> status;
};

using StartFn = std::function<absl::StatusOr<StartedDaemon>(const config::Configuration&)>;

// `program` is the executable's name, `component` its logger's name,
// `scope` the config::OptionScope whose keys the start-up log accounts for.
int DaemonMain(int argc, char** argv, const char* program, const char* component, unsigned scope,
               const char* summary, const StartFn& start);

}  // namespace weir::process
