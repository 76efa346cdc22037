// How the sinks get a connection back and send a batch again.
//
// RetryWithBackoff: try, and on a failure worth waiting out, wait 100 ms,
// then twice as long each time up to 2 s, until a deadline.
//
//   absl::Status status = RetryWithBackoff(
//       kTimeout, [&] { return TryConnect(); },
//       [](const absl::Status& s) { return absl::IsUnavailable(s); });
//
// SendBatchUntilSent: send a batch again when the server rolled it back or
// the connection broke (after reconnecting), until a deadline.
//
// Thread-safety: free functions; they call their arguments on the caller's
// thread and sleep there.
#pragma once

#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "spdlog/logger.h"

namespace weir::connectors {

// Calls `attempt` until it returns OK, `retryable` refuses its status, or the
// next try would begin more than `timeout` after the call; returns the last
// status. Before each wait, `on_retry` hears the status and the wait.
absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable,
                              absl::FunctionRef<void(const absl::Status&, absl::Duration)> on_retry);
absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable);

// What a failed send of a batch means to the sink that sent it.
enum class BatchFailure {
  kFatal,           // the task fails
  kRolledBack,      // the server rolled it back (a deadlock, say): send again
  kConnectionLost,  // reconnect, then send again
};

// Calls `send` until it returns OK, `classify` calls its status kFatal, or
// more than `timeout` has passed since the call; a rolled-back batch goes
// again at once, one that lost its connection after `reconnect` (which
// throws when it cannot). Each try again is logged on `log` as "<client>:
// <status>; sending the rows again" or "...; reconnecting to send the rows
// again". Returns OK or the status that ended it.
absl::Status SendBatchUntilSent(absl::Duration timeout, absl::FunctionRef<absl::Status()> send,
                                absl::FunctionRef<BatchFailure(const absl::Status&)> classify,
                                absl::FunctionRef<void()> reconnect, spdlog::logger& log, std::string_view client);

}  // namespace weir::connectors
