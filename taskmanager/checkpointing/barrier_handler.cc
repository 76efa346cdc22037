#include "taskmanager/checkpointing/barrier_handler.h"

#include <algorithm>

namespace weir::taskmanager {
namespace {

// State both forms share: which channels have finished, and which barriers
// of the current checkpoint have arrived.
class Tracker {
 public:
  explicit Tracker(int num_channels) : finished_(num_channels, false), arrived_(num_channels, false) {}

  void Start(int64_t id, int64_t timestamp_ms, absl::Time now) {
    current_ = id;
    timestamp_ms_ = timestamp_ms;
    started_ = now;
    std::fill(arrived_.begin(), arrived_.end(), false);
  }
  void Arrive(int channel) { arrived_[channel] = true; }
  void Finish(int channel) { finished_[channel] = true; }
  bool Complete() const {
    for (size_t i = 0; i < arrived_.size(); ++i) {
      if (!arrived_[i] && !finished_[i]) return false;
    }
    return true;
  }
  // Takes the current checkpoint.
  BarrierDecision Trigger(absl::Time now, bool unblock) {
    BarrierDecision d;
    d.trigger = *current_;
    d.trigger_timestamp_ms = timestamp_ms_;
    d.alignment = now - started_;
    d.unblock_all = unblock;
    last_triggered_ = *current_;
    current_.reset();
    return d;
  }
  std::optional<int64_t> current() const { return current_; }
  void Reset() { current_.reset(); }
  int64_t last_triggered() const { return last_triggered_; }

 private:
  std::vector<bool> finished_;
  std::vector<bool> arrived_;
  std::optional<int64_t> current_;
  int64_t timestamp_ms_ = 0;
  absl::Time started_;
  int64_t last_triggered_ = 0;
};

class AlignedHandler final : public BarrierHandler {
 public:
  explicit AlignedHandler(int num_channels) : tracker_(num_channels) {}

  BarrierDecision OnBarrier(int channel, int64_t id, int64_t timestamp_ms, absl::Time now) override {
    BarrierDecision d;
    const std::optional<int64_t> current = tracker_.current();
    // Late barrier of a checkpoint already taken or given up.
    if (id <= tracker_.last_triggered() || (current.has_value() && id < *current)) return d;
    if (!current.has_value() || id > *current) {
      if (current.has_value()) {
        d.abandoned = *current;
        d.unblock_all = true;
      }
      tracker_.Start(id, timestamp_ms, now);
    }
    tracker_.Arrive(channel);
    if (tracker_.Complete()) {
      BarrierDecision t = tracker_.Trigger(now, /*unblock=*/true);
      t.abandoned = d.abandoned;
      return t;
    }
    d.block_channel = true;
    return d;
  }

  BarrierDecision OnEndOfInput(int channel, absl::Time now) override {
    tracker_.Finish(channel);
    if (tracker_.current().has_value() && tracker_.Complete()) return tracker_.Trigger(now, /*unblock=*/true);
    return {};
  }

  std::optional<int64_t> pending() const override { return tracker_.current(); }

 private:
  Tracker tracker_;
};

class CountingHandler final : public BarrierHandler {
 public:
  explicit CountingHandler(int num_channels) : tracker_(num_channels) {}

  BarrierDecision OnBarrier(int channel, int64_t id, int64_t timestamp_ms, absl::Time now) override {
    BarrierDecision d;
    const std::optional<int64_t> current = tracker_.current();
    if (id <= tracker_.last_triggered() || (current.has_value() && id < *current)) return d;
    if (!current.has_value() || id > *current) {
      if (current.has_value()) d.abandoned = *current;
      tracker_.Start(id, timestamp_ms, now);
    }
    tracker_.Arrive(channel);
    if (tracker_.Complete()) {
      BarrierDecision t = tracker_.Trigger(now, /*unblock=*/false);
      t.abandoned = d.abandoned;
      return t;
    }
    return d;
  }

  BarrierDecision OnEndOfInput(int channel, absl::Time now) override {
    tracker_.Finish(channel);
    if (tracker_.current().has_value() && tracker_.Complete()) return tracker_.Trigger(now, /*unblock=*/false);
    return {};
  }

  std::optional<int64_t> pending() const override { return tracker_.current(); }

 private:
  Tracker tracker_;
};

}  // namespace

std::unique_ptr<BarrierHandler> BarrierHandler::Create(v1::CheckpointingMode mode, int num_channels) {
  if (mode == v1::AT_LEAST_ONCE) return std::make_unique<CountingHandler>(num_channels);
  return std::make_unique<AlignedHandler>(num_channels);
}

}  // namespace weir::taskmanager
