// weir-fleet-host: many real TaskManagers in one process, for fleet_bench.
//
//   weir-fleet-host --taskmanagers=K --id-prefix=P [-Dkey=value ...]
//
// Starts K TaskManager instances (TaskManager::Start, as weir-taskmanager
// does), each with its own id P-<i>, its own gRPC server and HTTP endpoint on
// free ports, its own membership session with the JobManager and its own
// directories under io.tmp.dirs; every -D setting applies to all of them.
// SIGTERM shuts them all down; SIGKILL takes them all down at once, as a
// machine that dies would. Only the process is shared: one gRPC library, one
// log (the taskmanager logger), and so one TCP connection from the process to
// the JobManager, which gRPC shares between channels to the same address.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "common/config/options.h"
#include "common/process/daemon_main.h"
#include "taskmanager/taskmanager.h"

int main(int argc, char** argv) {
  int count = 1;
  std::string prefix = "fleet";
  // Our own flags out of the way of DaemonMain's -D parsing.
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--taskmanagers=")) {
      if (!absl::SimpleAtoi(arg, &count) || count < 1 || count > 2000) {
        std::fprintf(stderr, "weir-fleet-host: --taskmanagers must be 1..2000, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (absl::ConsumePrefix(&arg, "--id-prefix=")) {
      prefix = std::string(arg);
    } else {
      rest.push_back(argv[i]);
    }
  }
  std::vector<std::unique_ptr<weir::taskmanager::TaskManager>> tms;
  namespace k = weir::config::keys;
  return weir::process::DaemonMain(
      static_cast<int>(rest.size()), rest.data(), "weir-fleet-host", "taskmanager", weir::config::kTaskManager,
      "Runs many Weir TaskManagers in one process (fleet_bench).",
      [&](const weir::config::Configuration& config) -> absl::StatusOr<weir::process::StartedDaemon> {
        const std::string tmp = config.GetString(k::kIoTmpDirs);
        for (int i = 0; i < count; ++i) {
          weir::config::Configuration own = config;
          const std::string id = absl::StrCat(prefix, "-", i);
          const auto set = [&own](absl::string_view key, const std::string& value) {
            return own.Set(key, value, weir::config::ValueSource::kCommandLine);
          };
          absl::Status s = set(k::kTaskManagerResourceId, id);
          if (s.ok()) s = set(k::kTaskManagerRpcPort, "0");
          if (s.ok()) s = set(k::kTaskManagerRestPort, "0");
          if (s.ok()) s = set(k::kIoTmpDirs, absl::StrCat(tmp.empty() ? "/tmp" : tmp, "/", id));
          if (!s.ok()) return s;
          auto tm = weir::taskmanager::TaskManager::Start(own);
          if (!tm.ok()) return absl::Status(tm.status().code(), absl::StrCat("TaskManager ", id, ": ", tm.status().message()));
          tms.push_back(*std::move(tm));
        }
        return weir::process::StartedDaemon{
            .shutdown =
                [&](const std::string& reason) {
                  for (auto& tm : tms) tm->Shutdown(reason);
                },
            .ready =
                [&] {
                  for (auto& tm : tms) {
                    if (!tm->Registered()) return false;
                  }
                  return true;
                },
            .alive =
                [&] {
                  for (auto& tm : tms) {
                    if (!tm->Alive()) return false;
                  }
                  return true;
                },
            .status = [&] { return absl::StrCat(tms.size(), " TaskManagers ", prefix, "-*"); }};
      });
}
