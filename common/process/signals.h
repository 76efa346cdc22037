// Orderly shutdown on SIGTERM / SIGINT for the daemons.
//
// Usage: call BlockTerminationSignals() first thing in main, before any thread
// starts (threads inherit the mask), then WaitForTerminationSignal() on the
// main thread once the daemon runs. No async-signal handler runs any Weir code.
#pragma once

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

}  // namespace weir::process
