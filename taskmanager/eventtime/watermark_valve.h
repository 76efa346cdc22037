// WatermarkValve: a task's event time from the watermarks of its input
// channels (docs/design/event-time.md, 3.6).
//
// Every input channel carries its own watermark (no later record on it has a
// timestamp at or below it) and may declare itself idle (a source partition
// that receives nothing). The task's watermark is the minimum over the
// channels that are active; it only grows, and the valve says
// when it did. The rules (Flink's status-aware valve, but for channels back
// from idle):
//   - a channel's watermark only grows; a lower one is ignored, as is a
//     watermark on an idle or ended channel;
//   - every active channel counts toward the minimum: a channel back from
//     idle behind the task's watermark does not pull it back, but holds it
//     where it is until it catches up, so that the other channels'
//     watermarks do not pass the records it still brings (Flink leaves
//     such a channel out until it catches up, and its records in between
//     may come late);
//   - a channel going idle stops counting; when the last active channel goes
//     idle the task's watermark advances to the largest of any channel, and
//     then the task is idle (kIdle out); the first channel back makes it
//     active again (kActive out, before any watermark);
//   - an ended channel (end of input) stops counting for good.
//
// Thread-safety: none; the task thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "weir/operator.h"

namespace weir::taskmanager::eventtime {

// The job API's (weir/operator.h): nothing known yet, and the end of input.
using weir::kMaxWatermark;
using weir::kMinWatermark;

// What the valve passes downstream, in order.
struct ValveEvent {
  enum class Kind { kWatermark, kIdle, kActive };
  Kind kind = Kind::kWatermark;
  int64_t watermark = kMinWatermark;  // kWatermark

  bool operator==(const ValveEvent& other) const {
    return kind == other.kind && (kind != Kind::kWatermark || watermark == other.watermark);
  }
};

class WatermarkValve {
 public:
  // `start`: when the channels are taken to have last advanced (for Holding).
  WatermarkValve(int num_channels, absl::Time start);

  std::vector<ValveEvent> OnWatermark(int channel, int64_t watermark, absl::Time now);
  std::vector<ValveEvent> OnStatus(int channel, bool idle, absl::Time now);
  std::vector<ValveEvent> OnEndOfInput(int channel, absl::Time now);

  // The task's watermark (kMinWatermark until every aligned channel sent one).
  int64_t watermark() const { return output_; }
  bool idle() const { return output_idle_; }
  int num_channels() const { return static_cast<int>(channels_.size()); }

  // An active channel whose watermark is the task's and has not grown for
  // `threshold` while another active channel's is ahead of it: the one
  // holding the task's event time back (for the stall warning). nullopt
  // when none.
  std::optional<int> Holding(absl::Time now, absl::Duration threshold) const;

 private:
  struct Channel {
    int64_t watermark = kMinWatermark;
    bool idle = false;
    bool ended = false;
    absl::Time advanced_at = absl::InfinitePast();
  };

  bool counts(const Channel& c) const { return !c.idle && !c.ended; }
  // Recomputes the output after a change; appends what to pass on.
  void Update(std::vector<ValveEvent>* out);

  std::vector<Channel> channels_;
  int64_t output_ = kMinWatermark;
  bool output_idle_ = false;
};

}  // namespace weir::taskmanager::eventtime
