#include "taskmanager/eventtime/watermark_valve.h"

#include <algorithm>

namespace weir::taskmanager::eventtime {

WatermarkValve::WatermarkValve(int num_channels, absl::Time start)
    : channels_(static_cast<size_t>(std::max(num_channels, 0))) {
  for (Channel& c : channels_) c.advanced_at = start;
}

std::vector<ValveEvent> WatermarkValve::OnWatermark(int channel, int64_t watermark, absl::Time now) {
  std::vector<ValveEvent> out;
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.idle || c.ended || watermark <= c.watermark) return out;
  c.watermark = watermark;
  c.advanced_at = now;
  Update(&out);
  return out;
}

std::vector<ValveEvent> WatermarkValve::OnStatus(int channel, bool idle, absl::Time now) {
  std::vector<ValveEvent> out;
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended || c.idle == idle) return out;
  c.idle = idle;
  if (!idle) {
    c.advanced_at = now;
    if (output_idle_) {
      output_idle_ = false;
      out.push_back({ValveEvent::Kind::kActive});
    }
  }
  Update(&out);
  return out;
}

std::vector<ValveEvent> WatermarkValve::OnEndOfInput(int channel, absl::Time) {
  std::vector<ValveEvent> out;
  Channel& c = channels_.at(static_cast<size_t>(channel));
  if (c.ended) return out;
  c.ended = true;
  Update(&out);
  return out;
}

void WatermarkValve::Update(std::vector<ValveEvent>* out) {
  bool any_active = false;
  int64_t minimum = kMaxWatermark;
  int64_t maximum = kMinWatermark;
  for (const Channel& c : channels_) {
    maximum = std::max(maximum, c.watermark);
    if (!counts(c)) continue;
    any_active = true;
    // A channel behind the output (back from idle) holds it where it is.
    minimum = std::min(minimum, c.watermark);
  }
  if (any_active) {
    if (minimum > output_) {
      output_ = minimum;
      out->push_back({ValveEvent::Kind::kWatermark, output_});
    }
    return;
  }
  if (output_idle_) return;
  // No channel is active any more (idle or ended): event time advances to
  // the furthest any channel got, and the task is idle unless every channel
  // ended (then it ends).
  if (maximum > output_) {
    output_ = maximum;
    out->push_back({ValveEvent::Kind::kWatermark, output_});
  }
  const bool all_ended = std::all_of(channels_.begin(), channels_.end(), [](const Channel& c) { return c.ended; });
  if (!all_ended) {
    output_idle_ = true;
    out->push_back({ValveEvent::Kind::kIdle});
  }
}

std::optional<int> WatermarkValve::Holding(absl::Time now, absl::Duration threshold) const {
  if (output_idle_) return std::nullopt;
  std::optional<int> holder;
  bool another_ahead = false;
  for (size_t i = 0; i < channels_.size(); ++i) {
    const Channel& c = channels_[i];
    if (!counts(c)) continue;
    if (c.watermark <= output_ && now - c.advanced_at >= threshold) {
      if (!holder.has_value()) holder = static_cast<int>(i);
    } else if (c.watermark > output_) {
      another_ahead = true;
    }
  }
  return another_ahead ? holder : std::nullopt;
}

}  // namespace weir::taskmanager::eventtime
