#include "common/process/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"

namespace weir::process {

bool SystemdNotifier::UnderSystemd() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && socket[0] != '\0';
}

absl::Duration SystemdNotifier::WatchdogPeriod() {
  uint64_t usec = 0;
  // > 0 only when WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is us).
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0) return absl::ZeroDuration();
  return absl::Microseconds(static_cast<int64_t>(usec));
}

SystemdNotifier::SystemdNotifier(std::function<bool()> ready, std::function<bool()> alive,
                                 std::function<std::string()> status)
    : ready_(std::move(ready)), alive_(std::move(alive)), status_(std::move(status)) {
  if (UnderSystemd()) thread_ = std::thread([this] { Run(); });
}

SystemdNotifier::~SystemdNotifier() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

void SystemdNotifier::Stopping() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  // Joined here: the daemon's shutdown that follows may tear down what
  // `alive` looks at.
  if (thread_.joinable()) thread_.join();
  if (UnderSystemd()) sd_notify(0, "STOPPING=1\nSTATUS=Shutting down");
}

void SystemdNotifier::Run() {
  auto log = logging::Get("systemd");
  while (ready_ != nullptr && !ready_()) {
    if (stop_.WaitForNotificationWithTimeout(absl::Milliseconds(50))) return;
  }
  const std::string status = status_ != nullptr ? status_() : std::string("Running");
  if (int rc = sd_notify(0, absl::StrCat("READY=1\nSTATUS=", status).c_str()); rc < 0) {
    log->warn("could not tell systemd that the daemon is ready (sd_notify: error {})", -rc);
  } else {
    log->info("told systemd: ready ({})", status);
  }
  const absl::Duration period = WatchdogPeriod();
  if (period <= absl::ZeroDuration()) return;
  log->info("feeding the systemd watchdog every {} ms while the main loops run",
            absl::ToInt64Milliseconds(period / 2));
  bool starving = false;
  while (!stop_.WaitForNotificationWithTimeout(period / 2)) {
    if (alive_ == nullptr || alive_()) {
      sd_notify(0, "WATCHDOG=1");
      starving = false;
    } else if (!starving) {
      starving = true;
      log->error("a main loop of this daemon has stopped; no longer feeding the systemd watchdog, which will "
                 "restart the daemon");
    }
  }
}

}  // namespace weir::process
