#include "tests/testing/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace weir::testing {
namespace {

// Every weir process a test starts (daemons, client) ignores the host's
// installed configuration (/etc/weir/weir.yaml): tests say what they want
// with -D. Set before any process starts; children inherit it.
const bool kIsolatedFromHostConfig = [] {
  setenv("WEIR_CONFIG_FILE", "/dev/null", /*overwrite=*/0);
  return true;
}();

// Whether 127.0.0.1:`port` can be bound right now (0: let the kernel choose).
// Returns the bound port, or 0 when it was taken.
int TryBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed while looking for a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int bound = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    bound = ntohs(addr.sin_port);
  }
  close(fd);
  return bound;
}

// The lower end of the kernel's ephemeral range (ports it hands to bind(0)
// and to outgoing connections), 32768 when unreadable.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  int high = 0;
  if (in >> low >> high && low > 0) return low;
  return 32768;
}

}  // namespace

int FreePort() {
  // A port from the kernel's ephemeral range would race with every daemon
  // that binds port 0 and every outgoing connection between this call and the
  // moment the test's daemon binds it (seen in CI: a TaskManager took the port
  // picked for the JobManager's REST endpoint). So pick below that range, at
  // random so that tests running side by side rarely meet, and never the same
  // port twice in one test process (two picks before either is bound).
  static absl::Mutex mu;
  static std::mt19937 rng ABSL_GUARDED_BY(mu)(std::random_device{}() ^ static_cast<unsigned>(getpid()));
  static absl::flat_hash_set<int> handed_out ABSL_GUARDED_BY(mu);
  absl::MutexLock lock(&mu);
  constexpr int kLow = 10000;
  const int high = EphemeralLow() - 1;
  if (high - kLow < 1000) {
    throw std::runtime_error(absl::StrCat("the kernel's ephemeral ports start at ", high + 1,
                                          ", too low to pick test ports below them (net.ipv4.ip_local_port_range)"));
  }
  std::uniform_int_distribution<int> pick(kLow, high);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    if (!handed_out.contains(port) && TryBind(port) == port) {
      handed_out.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free port found below the kernel's ephemeral range after 1000 tries");
}

std::string BinDir() {
  const char* dir = std::getenv("WEIR_BIN_DIR");
  if (dir != nullptr && *dir != '\0') return dir;
  return WEIR_DEFAULT_BIN_DIR;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(base != nullptr ? base : "/tmp", "/", prefix, "-XXXXXX");
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return std::string(buf.data());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout, absl::Duration poll) {
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(poll);
  }
}

Subprocess::Subprocess(std::vector<std::string> argv, std::string log_path) : log_path_(std::move(log_path)) {
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + log_path_);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, STDIN_FILENO);
    // Unblock what the parent may have blocked.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fd);
  if (pid_ < 0) throw std::runtime_error("fork failed");
}

Subprocess::~Subprocess() {
  if (running()) {
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10));
  }
}

std::string Subprocess::Log() const { return ReadFile(log_path_); }

void Subprocess::Signal(int sig) {
  // running() reaps it if it has ended; until we reap it, the pid stays ours.
  if (running()) kill(pid_, sig);
}

std::optional<int> Subprocess::Wait(absl::Duration timeout) {
  if (exit_code_.has_value()) return exit_code_;
  absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

bool Subprocess::running() {
  if (exit_code_.has_value() || pid_ <= 0) return false;
  return !Wait(absl::ZeroDuration()).has_value();
}

CommandResult RunCommand(const std::vector<std::string>& argv, absl::Duration timeout) {
  std::string dir = MakeTempDir("weir-cmd");
  std::string out_path = absl::StrCat(dir, "/out"), err_path = absl::StrCat(dir, "/err");
  CommandResult result;
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  absl::Time deadline = absl::Now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (absl::Now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = ReadFile(out_path);
  result.err = ReadFile(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir.c_str());
  return result;
}

}  // namespace weir::testing
