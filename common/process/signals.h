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
