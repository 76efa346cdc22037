// BarrierHandler: what a task with input channels does when checkpoint
// barriers (and ends of input) arrive, in its two forms.
//
// Aligned (EXACTLY_ONCE): once barrier n arrived on a channel, that channel is
// held back (blocked) until barrier n arrived on every channel; a finished
// channel counts as arrived. Only then is n taken, so the snapshot reflects
// exactly the records before the barriers. A newer barrier arriving during an
// alignment gives up the older checkpoint (it will be declined) and starts
// aligning on the newer one.
//
// Counting (AT_LEAST_ONCE): channels are never held back; n is taken once
// its barrier arrived on every channel that has not finished. Records that
// overtook the barrier on a fast channel are in the snapshot and are replayed
// after a restore: at-least-once. Since nothing is held back, several
// checkpoints are counted at once: barrier n+1 overtaking n gives up nothing
// (with max-concurrent-checkpoints > 1 it would decline every checkpoint).
//
// Thread-safety: not thread-safe; owned by one task thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/time/time.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::taskmanager {

namespace network {
class InputGate;
}  // namespace network

// What the task must do next. The channel part (unblock_all, block_channel)
// is carried out by ApplyToChannels, in its order.
struct BarrierDecision {
  // Hold back the channel the barrier came on.
  bool block_channel = false;
  // Release every held-back channel.
  bool unblock_all = false;
  // Take this checkpoint now (every barrier is in).
  std::optional<int64_t> trigger;
  int64_t trigger_timestamp_ms = 0;
  // How long the triggered checkpoint's alignment took (first barrier to last).
  absl::Duration alignment;
  // A checkpoint given up (a newer barrier came before it was complete).
  std::optional<int64_t> abandoned;
};

// Carries out the channel part of `decision` on `gate` for the barrier or end
// of input that came on `channel`: releases every channel first, then holds
// back `channel`. A newer barrier that gives up an alignment asks for both:
// the channels held for the older checkpoint go on, and the one that brought
// the newer barrier stays held, or its records after the barrier would go
// into the newer checkpoint's snapshot. Task thread only, as the gate's
// blocking.
void ApplyToChannels(const BarrierDecision& decision, int channel, network::InputGate& gate);

class BarrierHandler {
 public:
  static std::unique_ptr<BarrierHandler> Create(v1::CheckpointingMode mode, int num_channels);
  virtual ~BarrierHandler() = default;

  // Barrier `checkpoint_id` arrived on `channel` at `now`.
  virtual BarrierDecision OnBarrier(int channel, int64_t checkpoint_id, int64_t timestamp_ms, absl::Time now) = 0;
  // `channel` delivered END_OF_INPUT at `now`.
  virtual BarrierDecision OnEndOfInput(int channel, absl::Time now) = 0;
  // The checkpoint being aligned, or the oldest one counted, if any.
  virtual std::optional<int64_t> pending() const = 0;
};

}  // namespace weir::taskmanager
