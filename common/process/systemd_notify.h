// SystemdNotifier: tells systemd (Type=notify units) when the daemon is
// ready, feeds the unit's watchdog while the daemon's main loops are alive,
// and says when it stops. Uses libsystemd's sd_notify; everything is a no-op
// when the process was not started with NOTIFY_SOCKET (not under systemd).
//
// One thread: it polls `ready` every 50 ms until it holds and sends
// READY=1, then, when the unit sets WatchdogSec (WATCHDOG_USEC), sends
// WATCHDOG=1 every half period as long as `alive` holds. A daemon whose loop
// is stuck stops feeding the watchdog, and systemd restarts it.
//
// Thread-safety: construct and destroy on one thread; Stopping from any.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace weir::process {

class SystemdNotifier {
 public:
  // `status` is the unit's status line (systemctl status) once ready.
  SystemdNotifier(std::function<bool()> ready, std::function<bool()> alive, std::function<std::string()> status);
  ~SystemdNotifier();

  SystemdNotifier(const SystemdNotifier&) = delete;
  SystemdNotifier& operator=(const SystemdNotifier&) = delete;

  // STOPPING=1: the daemon began its shutdown. Also ends the thread.
  void Stopping();

  // Whether NOTIFY_SOCKET is set, and the watchdog period the unit asks
  // for (zero: none).
  static bool UnderSystemd();
  static absl::Duration WatchdogPeriod();

 private:
  void Run();

  const std::function<bool()> ready_;
  const std::function<bool()> alive_;
  const std::function<std::string()> status_;
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace weir::process
