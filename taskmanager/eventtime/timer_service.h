// InternalTimerService: the timers of one keyed operator instance
// (weir::TimerService in the job API).
//
// Storage: every timer is an entry of a map state of the operator's keyed
// state backend, under its key — "weir.timers.event" or
// "weir.timers.processing", user key <time, 8 bytes big-endian with the sign
// bit flipped><ns>, empty value. So timers are in every snapshot of either
// backend (RocksDB: incrementally, with the rest of the state), and a
// restore at any parallelism brings back exactly the timers of its key
// groups. A new timer is not written at once: the snapshots keep it as a
// pending entry (KeyedStateBackend::AddPendingEntry: a copy of its bytes
// beside the backend's state) until it has been in
// `snapshots_before_write` of them (2 by default), and then it is written
// into the backend — after the last one's synchronous part
// (AfterSnapshot), so a checkpoint's synchronous part never writes timers.
// A timer that fires before the next snapshot (most of a window
// operator's) costs the backend nothing, one that fires later costs a copy
// per snapshot until then.
// An ordered index on the heap (time, key, ns) says which fires next;
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

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/hash/hash.h"
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

  // How many snapshots a timer is handed over to before it is written into
  // the backend. A hand-over copies ~40 bytes (~0.2 us) in the synchronous
  // part; a write and the later removal are two backend writes (~2 us each
  // with RocksDB) on the task thread after it. Most of a window operator's
  // timers fire before the next snapshot and cost neither. Measured with
  // q5 (bench/README.md): 4 instead of 2 still wrote 50,000-100,000 timers
  // per task after each checkpoint (a source catching up on a backlog holds
  // the watermark back for seconds) and made every synchronous part copy
  // twice as many; checkpoint p99 did not improve.
  static constexpr int kDefaultSnapshotsBeforeWrite = 2;

  // `backend`, `operator_state` (the operator's) and `element_time` (the
  // chain's slot) outlive the service. `snapshots_before_write` >= 1.
  InternalTimerService(KeyedStateBackend* backend, OperatorStateStore* operator_state, int max_parallelism,
                       int64_t* element_time, int snapshots_before_write = kDefaultSnapshotsBeforeWrite);

  // After the backend restored: indexes the timers it holds, and reads the
  // lateness floor of its key groups.
  void Restore();
  // Before the keyed and operator state are snapshotted: hands every timer
  // not in the backend to it as a pending entry, and records the floor.
  // Changes the backend's current key.
  void SnapshotState();
  // After the snapshot's synchronous part (the barrier is out): writes the
  // timers that have now been in `snapshots_before_write` snapshots into the
  // backend. Changes the backend's current key. Skipped, the next
  // SnapshotState does it.
  // Returns how many timers it wrote.
  size_t AfterSnapshot();

  // For an operator with no watermark strategy upstream (`owner` names it
  // in the log): its first event-time timer is logged as a WARN, since its
  // event time stays at kMinWatermark and such timers fire only when a
  // bounded input ends.
  void WarnOnEventTimeTimers(std::string owner) { warn_owner_ = std::move(owner); }

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
  size_t size(TimeDomain domain) const { return TimersOf(domain).index.size(); }

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
  // Finds an entry of an Index by value (a View) in one hash probe.
  struct ByValueHash {
    using is_transparent = void;
    size_t operator()(const View& v) const { return absl::Hash<View>{}(v); }
    size_t operator()(const Entry* e) const { return (*this)(Less::Of(*e)); }
  };
  struct ByValueEq {
    using is_transparent = void;
    static View Of(const Entry* e) { return Less::Of(*e); }
    static const View& Of(const View& v) { return v; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Of(a) == Of(b);
    }
  };
  // Entries of an Index (nodes do not move while they are in it).
  using EntrySet = absl::flat_hash_set<const Entry*>;

  // The timers of one domain.
  struct Timers {
    explicit Timers(int generations) : handed_over(static_cast<size_t>(generations)) {}
    // Time order: what fires next.
    Index index;
    // The same entries, found by value: a window registers its timer with
    // every record, and almost always finds it there.
    absl::flat_hash_set<const Entry*, ByValueHash, ByValueEq> by_value;
    // Those not in the backend: handed_over[i] the ones handed over to i
    // snapshots so far (handed_over[0]: registered since the last), `aged`
    // those handed over to snapshots_before_write (for AfterSnapshot).
    std::vector<EntrySet> handed_over;
    EntrySet aged;

    // Adds a timer the backend does not hold (or, `in_backend`, does).
    void Add(Entry entry, bool in_backend);
    // Takes `it` out of every structure; sets *in_backend to whether the
    // backend holds it (the caller removes it there).
    Index::node_type Remove(Index::iterator it, bool* in_backend);
  };

  Timers& TimersOf(TimeDomain domain) { return domain == TimeDomain::kEventTime ? event_ : processing_; }
  const Timers& TimersOf(TimeDomain domain) const {
    return domain == TimeDomain::kEventTime ? event_ : processing_;
  }
  static std::string_view StateName(TimeDomain domain) {
    return domain == TimeDomain::kEventTime ? kEventTimers : kProcessingTimers;
  }
  void Fire(TimeDomain domain, int64_t limit, absl::FunctionRef<void(const FiredTimer&)> fire);
  size_t WriteAged();

  KeyedStateBackend* const backend_;
  OperatorListState* const floor_state_;
  const int max_parallelism_;
  int64_t* const element_time_;
  // Restored floor per key group of the backend's range; empty: none.
  std::vector<int64_t> floor_;
  int64_t highest_floor_ = kMinWatermark;
  // Most timers (a window's) fire before they would be written.
  Timers event_;
  Timers processing_;
  int64_t watermark_ = kMinWatermark;
  std::optional<std::string> warn_owner_;  // WarnOnEventTimeTimers, until the warning
};

// <time, 8 bytes big-endian, sign bit flipped><ns>: byte order is time
// order. Exposed for tests.
std::string EncodeTimer(int64_t time, std::string_view ns);
// Inverse of EncodeTimer; false when `bytes` is shorter than 8.
bool DecodeTimer(std::string_view bytes, int64_t* time, std::string_view* ns);

}  // namespace weir::taskmanager
