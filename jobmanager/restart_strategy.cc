#include "jobmanager/restart_strategy.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/options.h"

namespace weir::jobmanager {
namespace {

namespace k = config::keys;

class NoRestart final : public RestartStrategy {
 public:
  std::optional<absl::Duration> OnFailure(absl::Time) override { return std::nullopt; }
  std::string Describe() const override { return "none"; }
};

class FixedDelay final : public RestartStrategy {
 public:
  FixedDelay(int attempts, absl::Duration delay) : attempts_(attempts), delay_(delay) {}
  std::optional<absl::Duration> OnFailure(absl::Time) override {
    if (used_ >= attempts_) return std::nullopt;
    ++used_;
    return delay_;
  }
  std::string Describe() const override {
    return absl::StrCat("fixed-delay (", attempts_, " restarts, ", config::FormatDuration(delay_), " apart; ",
                        used_, " used)");
  }

 private:
  const int attempts_;
  const absl::Duration delay_;
  int used_ = 0;
};

class ExponentialDelay final : public RestartStrategy {
 public:
  explicit ExponentialDelay(const RestartStrategyOptions& o) : options_(o), backoff_(o.initial_backoff) {}
  std::optional<absl::Duration> OnFailure(absl::Time now) override {
    if (last_failure_.has_value() && now - *last_failure_ >= options_.reset_threshold) {
      backoff_ = options_.initial_backoff;
    }
    last_failure_ = now;
    const absl::Duration base = backoff_;
    backoff_ = std::min(options_.max_backoff, base * options_.multiplier);
    std::uniform_real_distribution<double> jitter(-options_.jitter, options_.jitter);
    return std::max(absl::ZeroDuration(), base + base * jitter(random_));
  }
  std::string Describe() const override {
    return absl::StrCat("exponential-delay (", config::FormatDuration(options_.initial_backoff), " to ",
                        config::FormatDuration(options_.max_backoff), ")");
  }

 private:
  const RestartStrategyOptions options_;
  absl::Duration backoff_;
  std::optional<absl::Time> last_failure_;
  std::mt19937_64 random_{std::random_device{}()};
};

absl::StatusOr<double> ParseDouble(const config::Configuration& config, absl::string_view key, double min,
                                   double max) {
  double value = 0;
  const std::string text = config.GetString(key);
  // NaN compares false with everything: it would pass a plain range check.
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, " is '", text, "'; expected a number from ", min, " to ", max));
  }
  return value;
}

}  // namespace

absl::StatusOr<RestartStrategyOptions> RestartStrategyOptions::FromConfig(const config::Configuration& config,
                                                                          bool checkpointing) {
  RestartStrategyOptions o;
  const std::string type = config.GetString(k::kRestartStrategyType);
  if (type.empty()) {
    o.type = checkpointing ? Type::kExponentialDelay : Type::kNone;
  } else if (type == "none" || type == "disable") {
    o.type = Type::kNone;
  } else if (type == "fixed-delay" || type == "fixeddelay") {
    o.type = Type::kFixedDelay;
  } else if (type == "exponential-delay") {
    o.type = Type::kExponentialDelay;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(k::kRestartStrategyType, " is '", type,
                                                   "'; expected none, fixed-delay or exponential-delay"));
  }
  o.fixed_attempts = static_cast<int>(config.GetInt(k::kRestartFixedAttempts));
  o.fixed_delay = config.GetDuration(k::kRestartFixedDelay);
  o.initial_backoff = config.GetDuration(k::kRestartInitialBackoff);
  o.max_backoff = config.GetDuration(k::kRestartMaxBackoff);
  o.reset_threshold = config.GetDuration(k::kRestartResetThreshold);
  absl::StatusOr<double> multiplier = ParseDouble(config, k::kRestartBackoffMultiplier, 1.0, 100.0);
  if (!multiplier.ok()) return multiplier.status();
  o.multiplier = *multiplier;
  absl::StatusOr<double> jitter = ParseDouble(config, k::kRestartJitterFactor, 0.0, 1.0);
  if (!jitter.ok()) return jitter.status();
  o.jitter = *jitter;
  if (o.max_backoff < o.initial_backoff) {
    return absl::InvalidArgumentError(absl::StrCat(k::kRestartMaxBackoff, " (", config::FormatDuration(o.max_backoff),
                                                   ") is below ", k::kRestartInitialBackoff, " (",
                                                   config::FormatDuration(o.initial_backoff), ")"));
  }
  return o;
}

std::unique_ptr<RestartStrategy> RestartStrategy::Create(const RestartStrategyOptions& options) {
  switch (options.type) {
    case RestartStrategyOptions::Type::kNone: return std::make_unique<NoRestart>();
    case RestartStrategyOptions::Type::kFixedDelay:
      return std::make_unique<FixedDelay>(options.fixed_attempts, options.fixed_delay);
    case RestartStrategyOptions::Type::kExponentialDelay: return std::make_unique<ExponentialDelay>(options);
  }
  return std::make_unique<NoRestart>();
}

}  // namespace weir::jobmanager
