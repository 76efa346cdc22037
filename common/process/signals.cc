#include "common/process/signals.h"

#include <csignal>
#include <pthread.h>

namespace weir::process {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  // A peer that goes away mid-write must not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  return sig;
}

}  // namespace weir::process

#include <execinfo.h>
#include <initializer_list>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace weir::process {
namespace {

const char* g_program = "weir";
thread_local const char* t_crash_context = nullptr;

void WriteString(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void WriteNumber(long v) {
  char buf[24];
  int i = sizeof(buf);
  buf[--i] = '\0';
  bool negative = v < 0;
  unsigned long u = negative ? -static_cast<unsigned long>(v) : static_cast<unsigned long>(v);
  do {
    buf[--i] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u > 0 && i > 1);
  if (negative) buf[--i] = '-';
  WriteString(buf + i);
}

// Only async-signal-safe calls from here on (backtrace was primed at start).

// `label` and the thread's crash context when it set one, then `tail`, then
// the calling thread's frames, one per line.
void WriteContextAndFrames(const char* label, const char* tail) {
  if (t_crash_context != nullptr) {
    WriteString(label);
    WriteString(t_crash_context);
  }
  WriteString(tail);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
}

void OnFatalSignal(int sig) {
  WriteString(g_program);
  WriteString(": fatal signal ");
  WriteString(sigabbrev_np(sig) != nullptr ? sigabbrev_np(sig) : "?");
  WriteString(" in pid ");
  WriteNumber(getpid());
  WriteContextAndFrames(" while running ", "; backtrace:\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

// WriteBacktraceOf: the signal it sends, whether its handler is installed
// (without it the signal's default action would end the process), and the
// request the handler answers.
int BacktraceSignal() { return SIGRTMIN + 4; }
std::atomic<bool> g_backtrace_handler_installed{false};
// The kernel thread id of the last thread that wrote its backtrace.
std::atomic<pid_t> g_backtrace_answered{0};

void OnBacktraceSignal(int) {
  const int saved_errno = errno;
  WriteString(g_program);
  WriteString(": backtrace of thread ");
  WriteNumber(static_cast<long>(gettid()));
  WriteContextAndFrames(" running ", ":\n");
  g_backtrace_answered.store(gettid());
  errno = saved_errno;
}

}  // namespace

bool WriteBacktraceOf(pthread_t thread, pid_t tid, absl::Duration wait) {
  if (!g_backtrace_handler_installed.load()) return false;
  // One request at a time; an answer counts only from the thread asked.
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  g_backtrace_answered.store(0);
  if (pthread_kill(thread, BacktraceSignal()) != 0) return false;
  const absl::Time deadline = absl::Now() + wait;
  while (g_backtrace_answered.load() != tid) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

void InstallCrashHandler(const char* program) {
  g_program = program;
  // The first backtrace() loads libgcc, which is not safe inside a handler.
  void* frames[1];
  backtrace(frames, 1);
  struct sigaction action {};
  action.sa_handler = OnFatalSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &action, nullptr);
  struct sigaction backtrace_action {};
  backtrace_action.sa_handler = OnBacktraceSignal;
  sigemptyset(&backtrace_action.sa_mask);
  backtrace_action.sa_flags = SA_RESTART;
  if (sigaction(BacktraceSignal(), &backtrace_action, nullptr) == 0) g_backtrace_handler_installed.store(true);
}

void SetCrashContext(const char* context) { t_crash_context = context; }

}  // namespace weir::process
