// Event time in the job API: where a stream's records get their timestamps
// and how its watermarks follow (docs/design/event-time.md, section 3).
//
//   auto timed = events.AssignTimestampsAndWatermarks(weir::WatermarkStrategy<Event>{
//       .out_of_orderness = std::chrono::seconds(5),
//       .timestamp = [](const Event& e) { return e.time_ms; }});
//
// A record's event time is Unix ms. The watermark says: no record later on
// this stream has a timestamp at or below it. With bounded out-of-orderness
// B it trails the largest timestamp seen by B (plus one ms), so a record up
// to B behind the newest is still on time.
//
// Header-only; part of the job API (weir/job.h includes it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "weir/operator.h"

namespace weir {

// What to do with a record whose timestamp is missing (kNoTimestamp),
// negative, or further ahead of the wall clock than `max_future`.
enum class InvalidTimestamps {
  kFail,  // the job fails at once, naming the record's time (the default)
  kDrop,  // the record is dropped and counted (metric
          // weir_event_time_dropped_records_total of the operator)
};

template <typename T>
struct WatermarkStrategy {
  // How far behind the newest timestamp a record may come and still be on
  // time. 0: timestamps only grow.
  std::chrono::milliseconds out_of_orderness{0};
  // A stream (a Kafka partition, a subtask) without records for this long
  // of processing time is idle: it stops holding event time back
  // downstream, until its next record. 0 (default): never idle — a quiet
  // stream holds every window behind it, and the log says so.
  std::chrono::milliseconds idleness{0};
  // The event time of a record; empty: the time it already carries (set by
  // its source, e.g. a Kafka record's timestamp).
  std::function<int64_t(const T&)> timestamp;
  InvalidTimestamps invalid_timestamps = InvalidTimestamps::kFail;
  // Timestamps more than this ahead of the wall clock are invalid (a clock
  // or a unit gone wrong: seconds read as ms). 0: no check.
  std::chrono::milliseconds max_future = std::chrono::hours(24);
  // Watermark alignment within a Kafka source subtask: a partition whose
  // watermark runs more than this ahead of the slowest partition still
  // being read is paused until that one catches up, so that event time,
  // and the windows waiting on it, move with the slowest partition rather
  // than piling up behind it (reading a backlog, one partition can be
  // served far ahead of the others). It is read again once within half the
  // drift. A partition read to its end (or, getting neither records nor an
  // end, after the source waited a second on an empty fetch queue) holds
  // no other back until its next record. 0 (default): off. Only
  // kafka::SourceOptions::watermarks takes it; AssignTimestampsAndWatermarks
  // refuses it.
  std::chrono::milliseconds max_drift{0};
};

namespace internal {

// The wall clock, Unix ms (processing time; CheckTimestamp's `now_ms`).
inline int64_t WallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why `timestamp` is not usable ("" when it is), given the wall clock `now_ms`.
inline std::string CheckTimestamp(int64_t timestamp, int64_t now_ms, std::chrono::milliseconds max_future) {
  if (timestamp == kNoTimestamp) return "the record has no timestamp";
  if (timestamp < 0) return "its timestamp " + std::to_string(timestamp) + " is before 1970";
  if (max_future.count() > 0 && timestamp > now_ms && timestamp - now_ms > max_future.count()) {
    return "its timestamp " + std::to_string(timestamp) + " is " + std::to_string(timestamp - now_ms) +
           " ms ahead of the wall clock, more than max_future (" + std::to_string(max_future.count()) + " ms)";
  }
  return "";
}

// The watermark of a source subtask from its splits (Kafka partitions, or
// the whole subtask): each split's is its largest timestamp minus the bound
// (minus one ms); the subtask's is the minimum over splits that are neither
// idle nor finished, and it never goes back. When every open split is idle
// the subtask is idle, at the furthest split's watermark. Not thread-safe.
//
// Idleness: a split is idle after `idleness_ms` (> 0) of processing time
// without a record, and only while it is caught up with its source (a
// Kafka partition read to the broker's end: SetCaughtUp; a split whose
// source cannot tell is caught up). It is active again with its next
// record, or as soon as its source has records for it. An active split
// behind the subtask's watermark (back from idleness) holds the watermark
// where it is until it catches up, so that no other split's records move
// event time past the records it has still to deliver.
//
// A caller that can ask the source whether an idle split really has nothing
// (a broker round trip) checks the splits Passing() names and lets
// Combine() move past them only as far as its answer covers (`limit`).
//
// A caller that must first tell others before a split goes idle (the
// Kafka source's subtasks, connectors/kafka/shared_idleness.h) closes the
// split's gate (SetIdleGate): the split then stays active until the caller
// opens it again, and eligible() says whether it would be idle otherwise.
class SplitWatermarks {
 public:
  struct Combined {
    int64_t watermark = kMinWatermark;
    bool idle = false;
  };

  SplitWatermarks(int64_t out_of_orderness_ms, int64_t idleness_ms)
      : bound_(std::max<int64_t>(0, out_of_orderness_ms)), idleness_(std::max<int64_t>(0, idleness_ms)) {}

  // A new split; returns its index.
  int AddSplit(std::string name, int64_t now_ms) {
    splits_.push_back(Split{std::move(name), kMinWatermark, now_ms});
    return static_cast<int>(splits_.size()) - 1;
  }
  void OnRecord(int split, int64_t timestamp, int64_t now_ms) {
    Split& s = splits_.at(static_cast<size_t>(split));
    s.last_record_ms = now_ms;
    if (timestamp == kNoTimestamp) return;
    // max_ts - bound - 1, without overflow at the extremes.
    const int64_t mark = timestamp < kMinWatermark + bound_ + 1 ? kMinWatermark : timestamp - bound_ - 1;
    s.watermark = std::max(s.watermark, mark);
  }
  // A bounded split ended: it no longer holds event time back.
  void Finish(int split) { splits_.at(static_cast<size_t>(split)).finished = true; }
  // A split held back on purpose (a Kafka partition paused by alignment)
  // does not go idle while held; its idleness counts again from its
  // release.
  void Hold(int split, bool held, int64_t now_ms) {
    Split& s = splits_.at(static_cast<size_t>(split));
    if (s.held && !held) s.last_record_ms = now_ms;
    s.held = held;
  }
  // Whether the split's source has nothing for it that it has not read
  // (true until told otherwise). A split that is not caught up is active,
  // however long it has had no record.
  void SetCaughtUp(int split, bool caught_up) { splits_.at(static_cast<size_t>(split)).caught_up = caught_up; }
  // Whether the split may be idle at all (true until told otherwise).
  void SetIdleGate(int split, bool open) { splits_.at(static_cast<size_t>(split)).gate = open; }

  // What the subtask's watermark would become now without a limit.
  int64_t Candidate(int64_t now_ms) const {
    bool any_active = false;
    int64_t minimum = kMaxWatermark;
    int64_t furthest = kMinWatermark;
    for (const Split& s : splits_) {
      if (s.finished) continue;
      furthest = std::max(furthest, s.watermark);
      if (Idle(s, now_ms)) continue;
      any_active = true;
      // Behind the output (back from idleness): holds it where it is.
      minimum = std::min(minimum, std::max(s.watermark, output_.watermark));
    }
    if (!any_active) return std::max(output_.watermark, furthest);
    return minimum == kMaxWatermark ? output_.watermark : std::max(output_.watermark, minimum);
  }

  // The idle splits the watermark would move past if it advanced now: those
  // behind Candidate(now_ms), which is above the output.
  std::vector<int> Passing(int64_t now_ms) const {
    std::vector<int> passing;
    const int64_t candidate = Candidate(now_ms);
    if (candidate <= output_.watermark) return passing;
    for (size_t i = 0; i < splits_.size(); ++i) {
      const Split& s = splits_[i];
      if (!s.finished && Idle(s, now_ms) && s.watermark < candidate) passing.push_back(static_cast<int>(i));
    }
    return passing;
  }

  // The subtask's watermark and idleness now (call at every periodic tick):
  // Candidate(now_ms), but no further than `limit` while that passes an
  // idle split (Passing), or at all with `limit_always` (the caller's
  // answer must cover every move, not only those past its own idle splits).
  Combined Combine(int64_t now_ms, int64_t limit = kMaxWatermark, bool limit_always = false) {
    bool any_active = false;
    bool any_open = false;
    for (const Split& s : splits_) {
      if (s.finished) continue;
      any_open = true;
      if (!Idle(s, now_ms)) any_active = true;
    }
    if (!splits_.empty() && !any_open) {
      output_ = {kMaxWatermark, false};
      return output_;
    }
    const int64_t candidate = Candidate(now_ms);
    int64_t next = candidate;
    if (next > limit && (limit_always || !Passing(now_ms).empty())) next = std::max(output_.watermark, limit);
    output_.watermark = next;
    // Every open split idle: nothing is waited for any more, and event
    // time moves to the furthest split's (as the input valve does when its
    // last active channel goes idle), so the windows a burst filled fire.
    // The subtask is idle only once it got there: downstream ignores
    // watermarks from an idle input.
    output_.idle = !any_active && next == candidate;
    return output_;
  }

  // Splits that hold the watermark (theirs is the lowest) and have had no
  // record for `quiet_ms`, by name: for the stall warning. As of the last
  // Combine.
  std::vector<std::string> Quiet(int64_t now_ms, int64_t quiet_ms) const {
    std::vector<std::string> names;
    for (const Split& s : splits_) {
      const bool holding = s.watermark <= output_.watermark;
      if (!s.finished && !Idle(s, now_ms) && holding && now_ms - s.last_record_ms >= quiet_ms) {
        names.push_back(s.name);
      }
    }
    return names;
  }

  size_t size() const { return splits_.size(); }
  // One split's watermark (kMinWatermark before its first record), whether
  // it is idle at `now_ms`, and when its last record came.
  int64_t watermark(int split) const { return splits_.at(static_cast<size_t>(split)).watermark; }
  bool idle(int split, int64_t now_ms) const { return Idle(splits_.at(static_cast<size_t>(split)), now_ms); }
  // Whether it would be idle with its gate open.
  bool eligible(int split, int64_t now_ms) const { return Eligible(splits_.at(static_cast<size_t>(split)), now_ms); }
  int64_t last_record_ms(int split) const { return splits_.at(static_cast<size_t>(split)).last_record_ms; }
  // Whether the split stays active only because its source has records
  // for it (it has had no record for the idleness).
  bool kept_by_source(int split, int64_t now_ms) const {
    const Split& s = splits_.at(static_cast<size_t>(split));
    return !s.caught_up && idleness_ > 0 && !s.held && now_ms - s.last_record_ms >= idleness_;
  }

 private:
  struct Split {
    std::string name;
    int64_t watermark = kMinWatermark;
    int64_t last_record_ms = 0;
    bool finished = false;
    bool held = false;
    bool caught_up = true;
    bool gate = true;
  };
  bool Eligible(const Split& s, int64_t now_ms) const {
    return idleness_ > 0 && !s.held && s.caught_up && now_ms - s.last_record_ms >= idleness_;
  }
  bool Idle(const Split& s, int64_t now_ms) const { return s.gate && Eligible(s, now_ms); }

  const int64_t bound_;
  const int64_t idleness_;
  std::vector<Split> splits_;
  Combined output_;
};

// Sends a source subtask's event time (SplitWatermarks::Combine) downstream:
// ACTIVE before a watermark, a watermark only when it grew, and going idle
// after the watermark (event time may have moved to the furthest split's).
class WatermarkEmitter {
 public:
  void Emit(const SplitWatermarks::Combined& now, RecordOutput* output) {
    if (!now.idle && idle_) {
      idle_ = false;
      output->EmitWatermarkStatus(false);
    }
    if (now.watermark > emitted_) {
      emitted_ = now.watermark;
      output->EmitWatermark(emitted_);
    }
    if (now.idle && !idle_) {
      idle_ = true;
      output->EmitWatermarkStatus(true);
    }
  }
  // ACTIVE at once, when idle: a record of a split back from idleness
  // goes out after it, not before (a source calls it before such a record).
  void Activate(RecordOutput* output) {
    if (!idle_) return;
    idle_ = false;
    output->EmitWatermarkStatus(false);
  }
  bool idle() const { return idle_; }
  // Event time ended (kMaxWatermark), whoever sends it; false if it had.
  bool End() {
    if (emitted_ == kMaxWatermark) return false;
    emitted_ = kMaxWatermark;
    return true;
  }

 private:
  int64_t emitted_ = kMinWatermark;
  bool idle_ = false;
};

}  // namespace internal
}  // namespace weir
