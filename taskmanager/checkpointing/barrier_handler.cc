#include "taskmanager/checkpointing/barrier_handler.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <vector>

#include "taskmanager/network/input_gate.h"

namespace weir::taskmanager {
namespace {

// The aligned form's state: which channels have finished, and which barriers
// of the one checkpoint being aligned have arrived.
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
  // Takes the current checkpoint and releases every channel.
  BarrierDecision Trigger(absl::Time now) {
    BarrierDecision d;
    d.trigger = *current_;
    d.trigger_timestamp_ms = timestamp_ms_;
    d.alignment = now - started_;
    d.unblock_all = true;
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
      BarrierDecision t = tracker_.Trigger(now);
      t.abandoned = d.abandoned;
      return t;
    }
    d.block_channel = true;
    return d;
  }

  BarrierDecision OnEndOfInput(int channel, absl::Time now) override {
    tracker_.Finish(channel);
    if (tracker_.current().has_value() && tracker_.Complete()) return tracker_.Trigger(now);
    return {};
  }

  std::optional<int64_t> pending() const override { return tracker_.current(); }

 private:
  Tracker tracker_;
};

// Channels are never held back, so several checkpoints can be counted at
// once (max-concurrent-checkpoints > 1): barrier n+1 overtaking n on a fast
// channel leaves n counting. A channel's barriers come in order, so once a
// checkpoint is taken the older ones still counted had a channel that skipped
// them (its producer gave them up): they are dropped, and so is the first
// barrier of a checkpoint older than one counted already. Neither is declined
// here: the producer that skipped it declined it, and the coordinator
// subsumes it once a newer one completes.
class CountingHandler final : public BarrierHandler {
 public:
  explicit CountingHandler(int num_channels) : finished_(num_channels, false) {}

  BarrierDecision OnBarrier(int channel, int64_t id, int64_t timestamp_ms, absl::Time now) override {
    if (id <= last_triggered_) return {};
    auto it = counts_.find(id);
    if (it == counts_.end()) {
      if (!counts_.empty() && id < counts_.rbegin()->first) return {};
      it = counts_.emplace(id, Count{std::vector<bool>(finished_.size(), false), timestamp_ms, now}).first;
      if (counts_.size() > kMaxCounted) counts_.erase(counts_.begin());
    }
    it->second.arrived[channel] = true;
    if (!Complete(it->second)) return {};
    return Trigger(it, now);
  }

  BarrierDecision OnEndOfInput(int channel, absl::Time now) override {
    finished_[channel] = true;
    // Possibly several complete at once; one decision takes one checkpoint,
    // the newest, and the older ones go as after any trigger.
    for (auto it = counts_.rbegin(); it != counts_.rend(); ++it) {
      if (Complete(it->second)) return Trigger(std::prev(it.base()), now);
    }
    return {};
  }

  // The oldest checkpoint counted.
  std::optional<int64_t> pending() const override {
    if (counts_.empty()) return std::nullopt;
    return counts_.begin()->first;
  }

 private:
  // Checkpoints counted at once, at most; beyond it the oldest count goes.
  // The coordinator has at most 16 in progress (max-concurrent-checkpoints),
  // so of this many most were aborted already: counts pile up that far only
  // behind a channel that brings no barriers at all (its producer stuck).
  static constexpr size_t kMaxCounted = 64;

  struct Count {
    std::vector<bool> arrived;  // by channel
    int64_t timestamp_ms;
    absl::Time started;  // its first barrier
  };

  bool Complete(const Count& count) const {
    for (size_t i = 0; i < finished_.size(); ++i) {
      if (!count.arrived[i] && !finished_[i]) return false;
    }
    return true;
  }

  // Takes the checkpoint of `it` and forgets it and every older one.
  BarrierDecision Trigger(std::map<int64_t, Count>::iterator it, absl::Time now) {
    BarrierDecision d;
    d.trigger = it->first;
    d.trigger_timestamp_ms = it->second.timestamp_ms;
    d.alignment = now - it->second.started;
    last_triggered_ = it->first;
    counts_.erase(counts_.begin(), std::next(it));
    return d;
  }

  std::vector<bool> finished_;  // by channel
  std::map<int64_t, Count> counts_;
  int64_t last_triggered_ = 0;
};

}  // namespace

void ApplyToChannels(const BarrierDecision& decision, int channel, network::InputGate& gate) {
  if (decision.unblock_all) gate.UnblockAllChannels();
  if (decision.block_channel) gate.BlockChannel(channel);
}

std::unique_ptr<BarrierHandler> BarrierHandler::Create(v1::CheckpointingMode mode, int num_channels) {
  if (mode == v1::AT_LEAST_ONCE) return std::make_unique<CountingHandler>(num_channels);
  return std::make_unique<AlignedHandler>(num_channels);
}

}  // namespace weir::taskmanager
