// RetryWithBackoff: how the sinks get a connection (back): try, and on a
// failure worth waiting out, wait 100 ms, then twice as long each time up to
// 2 s, until a deadline.
//
//   absl::Status status = RetryWithBackoff(
//       kTimeout, [&] { return TryConnect(); },
//       [](const absl::Status& s) { return absl::IsUnavailable(s); });
//
// Thread-safety: a free function; it calls its arguments on the caller's
// thread and sleeps there.
#pragma once

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace weir::connectors {

// Calls `attempt` until it returns OK, `retryable` refuses its status, or the
// next try would begin more than `timeout` after the call; returns the last
// status. Before each wait, `on_retry` hears the status and the wait.
absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable,
                              absl::FunctionRef<void(const absl::Status&, absl::Duration)> on_retry);
absl::Status RetryWithBackoff(absl::Duration timeout, absl::FunctionRef<absl::Status()> attempt,
                              absl::FunctionRef<bool(const absl::Status&)> retryable);

}  // namespace weir::connectors
