// weir-taskmanager: offers task slots to a JobManager and runs tasks in them.
#include "absl/strings/str_cat.h"
#include "common/process/daemon_main.h"
#include "common/process/fault_injection.h"
#include "taskmanager/taskmanager.h"

int main(int argc, char** argv) {
  std::unique_ptr<weir::taskmanager::TaskManager> tm;
  return weir::process::DaemonMain(
      argc, argv, "weir-taskmanager", "taskmanager", weir::config::kTaskManager, "Runs a Weir TaskManager.",
      [&](const weir::config::Configuration& config) -> absl::StatusOr<weir::process::StartedDaemon> {
        if (absl::Status s = weir::fault::Configure(config, "TaskManager"); !s.ok()) return s;
        auto started = weir::taskmanager::TaskManager::Start(config);
        if (!started.ok()) return started.status();
        tm = std::move(*started);
        return weir::process::StartedDaemon{
            .shutdown = [&](const std::string& reason) { tm->Shutdown(reason); },
            // Ready once its slots are offered to a JobManager.
            .ready = [&] { return tm->Registered(); },
            .alive = [&] { return tm->Alive(); },
            .status = [&] { return absl::StrCat("TaskManager ", tm->id(), " registered, serving on ", tm->address()); }};
      });
}
