// Orderly shutdown on SIGTERM / SIGINT for the daemons.
//
// Usage: call BlockTerminationSignals() first thing in main, before any thread
// starts (threads inherit the mask), then WaitForTerminationSignal() on the
// main thread once the daemon runs. No async-signal handler runs any Weir code.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include "absl/time/time.h"

namespace weir::process {

void BlockTerminationSignals();

// Blocks until SIGTERM or SIGINT arrives; returns the signal number.
int WaitForTerminationSignal();

}  // namespace weir::process

namespace weir::process {

// Installs handlers for fatal signals (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGABRT) that write one line naming the signal, the process and — when
// the crashing thread set one — what it was running, then a backtrace, to
// stderr, and then die of the same signal. Call once at start.
void InstallCrashHandler(const char* program);

// What the calling thread is running ("task <id>"), for the crash line;
// `context` must outlive the setting (nullptr clears it).
void SetCrashContext(const char* context);

// Makes `thread` (kernel thread id `tid`) write "<program>: backtrace of
// thread <tid> running <crash context>:" and its frames to stderr, from a
// handler of a real-time signal that InstallCrashHandler installs
// (SA_RESTART: the thread goes on afterwards). Waits up to `wait` for that
// thread's answer; false when no handler is installed or the thread did not
// answer (it ended, blocks the signal, or sleeps uninterruptibly).
bool WriteBacktraceOf(pthread_t thread, pid_t tid, absl::Duration wait);

}  // namespace weir::process
