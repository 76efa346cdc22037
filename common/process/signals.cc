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
