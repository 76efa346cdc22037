// weir-jobmanager: the cluster's coordinator daemon.
#include "absl/strings/str_cat.h"
#include "common/process/daemon_main.h"
#include "common/process/fault_injection.h"
#include "jobmanager/jobmanager.h"

int main(int argc, char** argv) {
  std::unique_ptr<weir::jobmanager::JobManager> jm;
  return weir::process::DaemonMain(
      argc, argv, "weir-jobmanager", "jobmanager", weir::config::kJobManager, "Runs a Weir JobManager.",
      [&](const weir::config::Configuration& config) -> absl::StatusOr<weir::process::StartedDaemon> {
        if (absl::Status s = weir::fault::Configure(config, "JobManager"); !s.ok()) return s;
        auto started = weir::jobmanager::JobManager::Start(config);
        if (!started.ok()) return started.status();
        jm = std::move(*started);
        // Start returns once the JobManager serves and has taken back its jobs.
        return weir::process::StartedDaemon{
            .shutdown = [&](const std::string&) { jm->Shutdown(); },
            .ready = nullptr,
            .alive = [&] { return jm->Alive(); },
            .status = [&] {
              return absl::StrCat("Serving RPCs on port ", jm->port(), " and HTTP on port ", jm->rest_port());
            }};
      });
}
