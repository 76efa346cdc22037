// weir-jobmanager: the cluster's coordinator daemon.
#include "common/process/daemon_main.h"
#include "common/process/fault_injection.h"
#include "jobmanager/jobmanager.h"

int main(int argc, char** argv) {
  std::unique_ptr<weir::jobmanager::JobManager> jm;
  return weir::process::DaemonMain(
      argc, argv, "weir-jobmanager", "jobmanager", weir::config::kJobManager, "Runs a Weir JobManager.",
      [&](const weir::config::Configuration& config) -> absl::StatusOr<weir::process::ShutdownFn> {
        if (absl::Status s = weir::fault::Configure(config, "JobManager"); !s.ok()) return s;
        auto started = weir::jobmanager::JobManager::Start(config);
        if (!started.ok()) return started.status();
        jm = std::move(*started);
        return [&](const std::string&) { jm->Shutdown(); };
      });
}
