// SystemdNotifier over a real notify socket: READY=1 only once the daemon
// says it is ready, WATCHDOG=1 while it is alive and not after, STOPPING=1.
#include "common/process/systemd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace weir::process {
namespace {

// A datagram socket standing in for systemd's.
class NotifySocket {
 public:
  NotifySocket() {
    path_ = testing::MakeTempDir("weir-notify-test") + "/notify";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    path_.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{.tv_sec = 0, .tv_usec = 100000};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~NotifySocket() { close(fd_); }
  const std::string& path() const { return path_; }
  // The next datagram, or "" after 100 ms without one.
  std::string Receive() {
    char buffer[4096];
    const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : std::string();
  }
  // Waits (up to 10 s) for a datagram that contains `text`.
  bool WaitFor(const std::string& text) {
    for (int i = 0; i < 100; ++i) {
      if (absl::StrContains(Receive(), text)) return true;
    }
    return false;
  }
  // Every datagram that arrives within `ms`.
  std::string ReceiveFor(int ms) {
    std::string all;
    for (int waited = 0; waited < ms; waited += 100) all += Receive() + "|";
    return all;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(SystemdNotifierTest, ReadyOnceReadyThenTheWatchdogWhileAlive) {
  NotifySocket socket;
  setenv("NOTIFY_SOCKET", socket.path().c_str(), 1);
  setenv("WATCHDOG_USEC", "200000", 1);  // pings every 100 ms
  EXPECT_TRUE(SystemdNotifier::UnderSystemd());
  EXPECT_EQ(SystemdNotifier::WatchdogPeriod(), absl::Milliseconds(200));
  std::atomic<bool> ready{false}, alive{true};
  {
    SystemdNotifier notifier([&] { return ready.load(); }, [&] { return alive.load(); },
                             [] { return std::string("serving"); });
    // Not ready: nothing at all.
    EXPECT_EQ(socket.ReceiveFor(300), "|||");
    ready = true;
    std::string first;
    for (int i = 0; i < 100 && first.empty(); ++i) first = socket.Receive();
    EXPECT_EQ(first, "READY=1\nSTATUS=serving");
    EXPECT_TRUE(socket.WaitFor("WATCHDOG=1"));
    // A stuck loop: the pings stop (one may have been on its way).
    alive = false;
    socket.ReceiveFor(1000);
    EXPECT_FALSE(absl::StrContains(socket.ReceiveFor(600), "WATCHDOG=1"));
    alive = true;
    EXPECT_TRUE(socket.WaitFor("WATCHDOG=1"));
    notifier.Stopping();
    EXPECT_TRUE(socket.WaitFor("STOPPING=1"));
  }
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
}

TEST(SystemdNotifierTest, OutsideSystemdNothingHappens) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(SystemdNotifier::UnderSystemd());
  std::atomic<int> asked{0};
  SystemdNotifier notifier([&] { return ++asked > 0; }, nullptr, nullptr);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(asked, 0);  // no thread runs
  notifier.Stopping();
}

}  // namespace
}  // namespace weir::process
