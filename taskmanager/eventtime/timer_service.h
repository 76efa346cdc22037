// InternalTimerService: the timers of one keyed operator instance
// (weir::TimerService in the job API).
//
// Storage: every timer is an entry of a map state of the operator's keyed
// state backend, under its key — "weir.timers.event" or
// "weir.timers.processing", user key <time, 8 bytes big-endian with the sign
// bit flipped><ns>, empty value. So timers are in every snapshot of either
// backend (RocksDB: incrementally, with the rest of the state), and a
// restore at any parallelism brings back exactly the timers of its key
// groups. A timer is written when a snapshot is taken (SnapshotState, before
// the backend's), so one that is registered and fires between two snapshots
// (most of a window operator's) costs the backend nothing. An ordered index on the heap (time, key, ns) says which fires next;
// Restore() rebuilds it from the backend, so the number of timers is bounded
// by memory (about 100 bytes per timer) even with RocksDB.
//
// Firing: AdvanceWatermark and FireProcessingTimers take timers due in time
// order, remove them, set the backend's current key to theirs and the
// chain's element time to the timer's time (event time) or kNoTimestamp, and
// call `fire`. Timers registered meanwhile at or before the limit fire in
// the same pass.
//
// The lateness floor: watermarks are not checkpointed, so after a restore
// an operator starts at kMinWatermark, and a record that was late before
// (its window fired, was committed and purged before the checkpoint) would
// open its window again and fire it twice. So each snapshot keeps, in the
// union list state "weir.watermark-floor", the watermark the operator had
// reached per key-group range, and after a restore CurrentWatermark() is at
// least that for the current key's group: it never goes back across a
// restore, at any parallelism. Timers still fire on live watermarks only.
//
// Thread-safety: the task thread only, like the backend.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/functional/function_ref.h"
#include "taskmanager/state/keyed_state_backend.h"
#include "weir/operator.h"

namespace weir::taskmanager {

class InternalTimerService final : public weir::TimerService {
 public:
  // The map states holding the timers (names starting "weir." are the
  // runtime's).
  static constexpr std::string_view kEventTimers = "weir.timers.event";
  static constexpr std::string_view kProcessingTimers = "weir.timers.processing";

  static constexpr std::string_view kWatermarkFloor = "weir.watermark-floor";

  // `backend`, `operator_state` (the operator's) and `element_time` (the
  // chain's slot) outlive the service.
  InternalTimerService(KeyedStateBackend* backend, OperatorStateStore* operator_state, int max_parallelism,
                       int64_t* element_time);

  // After the backend restored: indexes the timers it holds, and reads the
  // lateness floor of its key groups.
  void Restore();
  // Before the keyed and operator state are snapshotted: writes the timers
  // registered since the last snapshot, and records the floor. Changes the
  // backend's current key.
  void SnapshotState();

  void Register(TimeDomain domain, int64_t time, std::string_view ns) override;
  void Delete(TimeDomain domain, int64_t time, std::string_view ns) override;
  // The watermark reached, or the restored floor of the current key's
  // group if that is higher.
  int64_t CurrentWatermark() const override;
  int64_t CurrentProcessingTime() const override;

  // The watermark reached the operator: fires the event-time timers at or
  // before it, then remembers it.
  void AdvanceWatermark(int64_t watermark, absl::FunctionRef<void(const FiredTimer&)> fire);
  // Fires the processing-time timers at or before `now_ms`.
  void FireProcessingTimers(int64_t now_ms, absl::FunctionRef<void(const FiredTimer&)> fire);
  // When the next processing-time timer is due, if any.
  std::optional<int64_t> NextProcessingTime() const;

  // Timers waiting.
  size_t size(TimeDomain domain) const { return IndexOf(domain).size(); }

 private:
  using Entry = std::tuple<int64_t, std::string, std::string>;  // time, key, ns
  using View = std::tuple<int64_t, std::string_view, std::string_view>;
  // Orders entries and finds them by a View, without copying the strings.
  struct Less {
    using is_transparent = void;
    static View Of(const Entry& e) { return View(std::get<0>(e), std::get<1>(e), std::get<2>(e)); }
    static const View& Of(const View& v) { return v; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Of(a) < Of(b);
    }
  };
  using Index = std::set<Entry, Less>;

  Index& IndexOf(TimeDomain domain) { return domain == TimeDomain::kEventTime ? event_ : processing_; }
  const Index& IndexOf(TimeDomain domain) const {
    return domain == TimeDomain::kEventTime ? event_ : processing_;
  }
  Index& Unpersisted(TimeDomain domain) {
    return domain == TimeDomain::kEventTime ? unpersisted_event_ : unpersisted_processing_;
  }
  static std::string_view StateName(TimeDomain domain) {
    return domain == TimeDomain::kEventTime ? kEventTimers : kProcessingTimers;
  }
  void Fire(TimeDomain domain, int64_t limit, absl::FunctionRef<void(const FiredTimer&)> fire);

  KeyedStateBackend* const backend_;
  OperatorListState* const floor_state_;
  const int max_parallelism_;
  int64_t* const element_time_;
  // Restored floor per key group of the backend's range; empty: none.
  std::vector<int64_t> floor_;
  int64_t highest_floor_ = kMinWatermark;
  Index event_;
  Index processing_;
  // Timers registered since the last snapshot, not yet in the backend: most
  // (a window's) fire before the next snapshot and never reach it.
  Index unpersisted_event_;
  Index unpersisted_processing_;
  int64_t watermark_ = kMinWatermark;
  std::string scratch_;
};

// <time, 8 bytes big-endian, sign bit flipped><ns>: byte order is time
// order. Exposed for tests.
std::string EncodeTimer(int64_t time, std::string_view ns);
// Inverse of EncodeTimer; false when `bytes` is shorter than 8.
bool DecodeTimer(std::string_view bytes, int64_t* time, std::string_view* ns);

}  // namespace weir::taskmanager
