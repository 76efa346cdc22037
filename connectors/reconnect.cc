#include "connectors/reconnect.h"

#include "absl/time/clock.h"
#include "common/logging/logging.h"

namespace weir::connectors {

retry::RetryPolicy ReconnectPolicy(absl::Duration timeout) {
  return {.backoff = {.initial = absl::Milliseconds(100), .multiplier = 2, .max = absl::Seconds(2), .jitter = 0.5},
          .deadline = absl::Now() + timeout};
}

absl::Status SendBatchUntilSent(absl::Duration timeout, absl::FunctionRef<absl::Status()> send,
                                absl::FunctionRef<BatchFailure(const absl::Status&)> classify,
                                absl::FunctionRef<void()> reconnect, spdlog::logger& log, std::string_view client) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::Status status = send();
    if (status.ok()) return status;
    const BatchFailure failure = classify(status);
    if (failure == BatchFailure::kFatal || absl::Now() > deadline) return status;
    if (failure == BatchFailure::kRolledBack) {
      log.warn("{}: {}; sending the rows again", client, status);
      continue;
    }
    log.warn("{}: {}; reconnecting to send the rows again", client, status);
    reconnect();
  }
}

}  // namespace weir::connectors
