#include "connectors/reconnect.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "common/logging/logging.h"

namespace weir::connectors {

absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable,
                              absl::FunctionRef<void(const absl::Status&, absl::Duration)> on_retry) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration backoff = absl::Milliseconds(100);
  for (;;) {
    absl::Status status = attempt();
    if (status.ok() || !retryable(status) || absl::Now() + backoff > deadline) return status;
    on_retry(status, backoff);
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(2));
  }
}

absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable) {
  return RetryWithBackoff(timeout, attempt, retryable, [](const absl::Status&, absl::Duration) {});
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
