// How the sinks get a connection back and send a batch again.
//
// ReconnectPolicy: how the sinks wait between tries to connect (a
// retry::RetryPolicy for retry::Retry):
//
//   retry::RetryOutcome outcome = retry::Retry(
//       ReconnectPolicy(kTimeout), [&] { return TryConnect(); },
//       [](const absl::Status& s) { return absl::IsUnavailable(s); });
//
// SendBatchUntilSent: send a batch again when the server rolled it back or
// the connection broke (after reconnecting), until a deadline.
//
// Thread-safety: free functions; SendBatchUntilSent calls its arguments on
// the caller's thread.
#pragma once

#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/retry/backoff.h"
#include "spdlog/logger.h"

namespace weir::connectors {

// Waits of 100 ms, doubling up to 2 s, with equal jitter (each wait drawn
// from its upper half): every subtask of a sink, and every sink writing to
// the same server, loses its connection when that server restarts, and
// without jitter they would all come back at the same moments. No try
// starts more than `timeout` after the call.
retry::RetryPolicy ReconnectPolicy(absl::Duration timeout);

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
