// RestartStrategy: whether, and after how long, a failed job is restarted.
// The JobMaster asks it at every failure; it is the one place that decides a
// job's fate after a failure. Flink's strategies and option names:
//
//   none               the first failure fails the job
//   fixed-delay        restart-strategy.fixed-delay.attempts restarts, each
//                      restart-strategy.fixed-delay.delay after the failure
//   exponential-delay  restarts without limit, the delay growing from
//                      restart-strategy.exponential-delay.initial-backoff by
//                      .backoff-multiplier up to .max-backoff, with
//                      .jitter-factor of randomness; after
//                      .reset-backoff-threshold without a failure it starts
//                      over from the initial backoff
//
// Thread-safety: not thread-safe; owned by one JobMaster's worker thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/configuration.h"

namespace weir::jobmanager {

struct RestartStrategyOptions {
  enum class Type { kNone, kFixedDelay, kExponentialDelay };
  Type type = Type::kNone;
  int fixed_attempts = 1;
  absl::Duration fixed_delay = absl::Seconds(1);
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Minutes(1);
  double multiplier = 1.5;
  absl::Duration reset_threshold = absl::Hours(1);
  double jitter = 0.1;

  // From restart-strategy.* of `config`; `checkpointing` picks the default
  // type when restart-strategy.type is unset (exponential-delay with
  // checkpoints, none without). kInvalidArgument naming the key.
  static absl::StatusOr<RestartStrategyOptions> FromConfig(const config::Configuration& config, bool checkpointing);

  // The longest wait before a restart: the fixed delay, the exponential
  // strategy's max backoff, zero without restarts.
  absl::Duration LongestDelay() const {
    switch (type) {
      case Type::kFixedDelay: return fixed_delay;
      case Type::kExponentialDelay: return max_backoff;
      case Type::kNone: break;
    }
    return absl::ZeroDuration();
  }
};

class RestartStrategy {
 public:
  static std::unique_ptr<RestartStrategy> Create(const RestartStrategyOptions& options);
  virtual ~RestartStrategy() = default;

  // A failure at `now`: the delay before the restart, or nullopt when the
  // job must not be restarted any more.
  virtual std::optional<absl::Duration> OnFailure(absl::Time now) = 0;
  // "fixed-delay (3 restarts, 1 s apart)", for logs and errors.
  virtual std::string Describe() const = 0;
};

}  // namespace weir::jobmanager
