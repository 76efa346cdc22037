// Event-time windows on keyed streams (docs/job-authoring.md, "Windows"):
//
//   auto counts = bids.KeyBy([](const Bid& b) { return b.auction; })
//                     .Window(weir::TumblingWindows{.size = std::chrono::minutes(1)})
//                     .AllowedLateness(std::chrono::seconds(30))
//                     .Aggregate<Result>(weir::CountAggregate<Bid>{},
//                                [](const int64_t& auction, const weir::TimeWindow& w, int64_t n,
//                                   weir::Collector<Result>& out) { out.Collect({auction, w.end, n}); });
//
// A record belongs to every window its event time falls in. A window fires
// when the watermark passes its end: its result carries the window's last
// millisecond as event time. With allowed lateness L a record arriving after
// that but before the watermark passes end + L fires the window again (an
// update); later records are late: dropped, or sent to LateRecords() when
// that stream is consumed, and counted in weir_window_late_records_total. A
// session record is late only if the session it merges into is. Window
// contents and their timers are keyed state: checkpointed, restored and
// rescaled with the key.
//
// Header-only; part of the job API (weir/job.h includes it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weir/datastream.h"
#include "weir/metrics.h"
#include "weir/operator.h"
#include "weir/serializer.h"

namespace weir {

// [start, end) in event time (Unix ms).
struct TimeWindow {
  int64_t start = 0;
  int64_t end = 0;
  // The last millisecond in the window: when it fires, and its results'
  // event time.
  int64_t max_timestamp() const { return end - 1; }
  bool operator==(const TimeWindow&) const = default;
};

// Back-to-back windows of `size`, starting at multiples of size (shifted by
// `offset`, e.g. for time zones).
struct TumblingWindows {
  std::chrono::milliseconds size{0};
  std::chrono::milliseconds offset{0};
};

// Windows of `size` starting every `slide`: a record is in size / slide of
// them.
struct SlidingWindows {
  std::chrono::milliseconds size{0};
  std::chrono::milliseconds slide{0};
  std::chrono::milliseconds offset{0};
};

// Per key, records closer than `gap` in event time form one session: a
// record opens [time, time + gap), and windows that overlap or touch merge
// (a record can bridge two sessions). Aggregates used with sessions need
// Merge(Accumulator& into, const Accumulator& from).
struct SessionWindows {
  std::chrono::milliseconds gap{0};
};

// Counts the records of a window (an aggregate for WindowedStream::Aggregate).
template <typename T>
struct CountAggregate {
  using Accumulator = int64_t;
  using Result = int64_t;
  Accumulator Create() const { return 0; }
  void Add(Accumulator& count, const T&) const { ++count; }
  Result Get(const Accumulator& count) const { return count; }
  void Merge(Accumulator& into, const Accumulator& from) const { into += from; }
};

namespace internal {

inline int64_t FloorMod(int64_t a, int64_t b) {
  const int64_t m = a % b;
  return m < 0 ? m + b : m;
}

// The windows `timestamp` falls in, newest first.
inline void AssignWindows(const TumblingWindows& w, int64_t timestamp, std::vector<TimeWindow>* out) {
  const int64_t size = w.size.count();
  const int64_t start = timestamp - FloorMod(timestamp - w.offset.count(), size);
  out->push_back({start, start + size});
}
inline void AssignWindows(const SlidingWindows& w, int64_t timestamp, std::vector<TimeWindow>* out) {
  const int64_t size = w.size.count();
  const int64_t slide = w.slide.count();
  for (int64_t start = timestamp - FloorMod(timestamp - w.offset.count(), slide); start > timestamp - size;
       start -= slide) {
    out->push_back({start, start + size});
  }
}

inline void AssignWindows(const SessionWindows& w, int64_t timestamp, std::vector<TimeWindow>* out) {
  const int64_t gap = w.gap.count();
  out->push_back({timestamp, timestamp > kMaxWatermark - gap ? kMaxWatermark : timestamp + gap});
}
inline void CheckAssigner(const SessionWindows& w) {
  if (w.gap.count() <= 0) throw std::invalid_argument("SessionWindows: gap must be positive");
}
// Windows that overlap or touch belong to one session.
inline bool Touch(const TimeWindow& a, const TimeWindow& b) { return a.start <= b.end && b.start <= a.end; }

inline void CheckAssigner(const TumblingWindows& w) {
  if (w.size.count() <= 0) throw std::invalid_argument("TumblingWindows: size must be positive");
  if (w.offset.count() < 0 || w.offset >= w.size) {
    throw std::invalid_argument("TumblingWindows: offset must be at least 0 and below size");
  }
}
inline void CheckAssigner(const SlidingWindows& w) {
  if (w.size.count() <= 0 || w.slide.count() <= 0) {
    throw std::invalid_argument("SlidingWindows: size and slide must be positive");
  }
  if (w.offset.count() < 0 || w.offset >= w.slide) {
    throw std::invalid_argument("SlidingWindows: offset must be at least 0 and below slide");
  }
}

// 16 bytes: start and end (AppendOrderedInt64), so that byte order is start
// order.
inline std::string EncodeWindow(const TimeWindow& w) {
  std::string out;
  AppendOrderedInt64(w.start, out);
  AppendOrderedInt64(w.end, out);
  return out;
}
inline TimeWindow DecodeWindow(std::string_view bytes) {
  if (bytes.size() < 16) throw std::runtime_error("corrupt window state: a window takes 16 bytes");
  return TimeWindow{ReadOrderedInt64(bytes.substr(0, 8)), ReadOrderedInt64(bytes.substr(8, 8))};
}

// Sends what a window function collects with the window's time.
class AtTimeOutput final : public RecordOutput {
 public:
  AtTimeOutput(RecordOutput* output, int64_t time) : output_(output), time_(time) {}
  void Emit(void* record) override { output_->EmitAt(record, time_); }
  void EmitAt(void* record, int64_t) override { output_->EmitAt(record, time_); }

 private:
  RecordOutput* const output_;
  const int64_t time_;
};

// A write-back cache in front of the keyed state for the window contents'
// map entries (everything else passes through): a window's accumulator is
// read from the backend once, then updated in memory, and written back
// a quarter at a time when the cache holds `max_entries` (entries that
// match the backend are dropped first, at no cost); a window that opens
// and is purged between two write-backs never reaches the backend. A
// checkpoint does not write the cache back: HandOver copies the changed
// entries into the snapshot as pending entries (KeyedStateStore::
// AddPendingEntry), which costs the synchronous part a copy of their bytes
// instead of a RocksDB write each. With sliding windows and hot keys this
// turns several backend reads and writes per record into almost none. The
// owner tells it the current key (SetKey) whenever it sets the context's.
class WriteBackEntries final : public KeyedStateStore {
 public:
  WriteBackEntries(OperatorContext* context, size_t max_entries) : context_(context), max_entries_(max_entries) {}

  void SetKey(std::string_view key) {
    key_.assign(key.data(), key.size());
    has_key_ = true;
  }

  // Writes every change back to the keyed state, and empties the cache.
  void Flush() { Shrink(0); }

  // Leaves at most `target` entries: drops unchanged ones first, then
  // writes changed ones back (in one batch) and drops them. Bounding each
  // write-back to part of the cache bounds the stall of the task thread it
  // causes (a checkpoint barrier waits behind it).
  void Shrink(size_t target) {
    for (auto it = entries_.begin(); it != entries_.end() && entries_.size() > target;) {
      it = it->second.dirty ? std::next(it) : entries_.erase(it);
    }
    if (entries_.size() <= target) return;
    KeyedStateStore* store = context_->keyed_state();
    store->StartWriteBatch();
    for (auto it = entries_.begin(); it != entries_.end() && entries_.size() > target;) {
      const Entry& e = it->second;
      const std::string_view s = it->first;
      context_->SetCurrentKey(s.substr(0, e.key_length));
      const std::string_view name = s.substr(e.key_length, e.name_length);
      const std::string_view user_key = s.substr(e.key_length + e.name_length);
      if (e.value.has_value()) {
        store->PutEntry(name, user_key, *e.value);
      } else {
        store->RemoveEntry(name, user_key);
      }
      it = entries_.erase(it);
    }
    store->CommitWriteBatch();
    if (has_key_) context_->SetCurrentKey(key_);
  }

  // For a snapshot: hands a copy of every changed entry to the keyed state,
  // which keeps them beside its own in the snapshot; they stay cached and
  // changed.
  void HandOver() {
    KeyedStateStore* store = context_->keyed_state();
    for (const auto& [slot, e] : entries_) {
      if (!e.dirty) continue;
      const std::string_view s = slot;
      store->AddPendingEntry(s.substr(0, e.key_length), s.substr(e.key_length, e.name_length),
                             s.substr(e.key_length + e.name_length), e.value.has_value() ? &*e.value : nullptr);
    }
  }

  std::optional<std::string> GetEntry(std::string_view name, std::string_view user_key) override {
    auto it = entries_.find(Slot(name, user_key));
    if (it != entries_.end()) return it->second.value;
    std::optional<std::string> stored = context_->keyed_state()->GetEntry(name, user_key);
    Insert(stored, /*dirty=*/false, /*in_backend=*/stored.has_value());
    return stored;
  }
  void PutEntry(std::string_view name, std::string_view user_key, std::string_view value) override {
    auto it = entries_.find(Slot(name, user_key));
    if (it != entries_.end()) {
      it->second.value.emplace(value);
      it->second.dirty = true;
    } else {
      Insert(std::string(value), /*dirty=*/true, /*in_backend=*/true);  // may be there: written back either way
    }
  }
  // As PutEntry, for an entry the caller knows the backend does not hold
  // (a new element slot of a window): removed before the next write-back,
  // it costs the backend nothing.
  void PutNewEntry(std::string_view name, std::string_view user_key, std::string_view value) {
    auto it = entries_.find(Slot(name, user_key));
    if (it != entries_.end()) {
      it->second.value.emplace(value);
      it->second.dirty = true;
    } else {
      Insert(std::string(value), /*dirty=*/true, /*in_backend=*/false);
    }
  }
  void RemoveEntry(std::string_view name, std::string_view user_key) override {
    auto it = entries_.find(Slot(name, user_key));
    if (it == entries_.end()) {
      Insert(std::nullopt, /*dirty=*/true, /*in_backend=*/true);
    } else if (!it->second.in_backend) {
      // Born and gone between two write-backs (most windows): the backend
      // never hears of it.
      entries_.erase(it);
    } else {
      it->second.value.reset();
      it->second.dirty = true;
    }
  }

  // Not cached: the window contents use none of these.
  std::optional<std::string> Get(std::string_view name) override { return context_->keyed_state()->Get(name); }
  void Put(std::string_view name, std::string_view value) override { context_->keyed_state()->Put(name, value); }
  void Append(std::string_view name, std::string_view bytes) override { context_->keyed_state()->Append(name, bytes); }
  void Remove(std::string_view name) override { context_->keyed_state()->Remove(name); }
  std::vector<std::pair<std::string, std::string>> Entries(std::string_view) override {
    throw std::logic_error("the window contents' cache does not list entries");
  }
  void ClearEntries(std::string_view) override {
    throw std::logic_error("the window contents' cache does not clear entries");
  }

 private:
  struct Entry {
    std::optional<std::string> value;  // nullopt: absent, or removed
    bool dirty = false;
    bool in_backend = true;  // the backend may hold a value for it
    uint32_t key_length = 0;
    uint32_t name_length = 0;
  };

  // <key><name><user key>, in slot_.
  const std::string& Slot(std::string_view name, std::string_view user_key) {
    slot_.assign(key_);
    slot_.append(name);
    slot_.append(user_key);
    name_length_ = static_cast<uint32_t>(name.size());
    return slot_;
  }
  // Adds the entry of slot_ (as Slot left it), flushing first when full.
  void Insert(std::optional<std::string> value, bool dirty, bool in_backend) {
    if (entries_.size() >= max_entries_) {
      const std::string slot = slot_;
      Shrink(max_entries_ - max_entries_ / 4);
      slot_ = slot;
    }
    entries_.emplace(slot_,
                     Entry{std::move(value), dirty, in_backend, static_cast<uint32_t>(key_.size()), name_length_});
  }

  OperatorContext* const context_;
  const size_t max_entries_;
  std::string key_;
  bool has_key_ = false;
  std::string slot_;
  uint32_t name_length_ = 0;
  std::unordered_map<std::string, Entry> entries_;
};

// Window contents as one accumulator per (key, window): an Aggregate's,
// or a Reduce's running value.
template <typename T, typename K, typename Agg, typename WindowFn>
struct AggregateContents {
  using Acc = typename Agg::Accumulator;
  Agg agg;
  WindowFn window_fn;

  static constexpr std::string_view kState = "weir.window.contents";
  void Add(WriteBackEntries* state, const std::string& window, const T& value) const {
    std::optional<std::string> stored = state->GetEntry(kState, window);
    Acc acc = stored.has_value() ? Serializer<Acc>::Read(*stored) : agg.Create();
    agg.Add(acc, value);
    std::string bytes;
    Serializer<Acc>::Write(acc, bytes);
    state->PutEntry(kState, window, bytes);
  }
  template <typename Out>
  void Fire(WriteBackEntries* state, const std::string& window, const K& key, const TimeWindow& w,
            Collector<Out>& out) const {
    std::optional<std::string> stored = state->GetEntry(kState, window);
    if (!stored.has_value()) return;
    window_fn(key, w, agg.Get(Serializer<Acc>::Read(*stored)), out);
  }
  void Purge(WriteBackEntries* state, const std::string& window) const { state->RemoveEntry(kState, window); }
  // Sessions: `from`'s contents into `into`'s, and `from` purged.
  void Merge(WriteBackEntries* state, const std::string& into, const std::string& from) const {
    if constexpr (requires(Acc& a, const Acc& b) { agg.Merge(a, b); }) {
      std::optional<std::string> source = state->GetEntry(kState, from);
      if (!source.has_value()) return;
      std::optional<std::string> target = state->GetEntry(kState, into);
      Acc acc = target.has_value() ? Serializer<Acc>::Read(*target) : agg.Create();
      agg.Merge(acc, Serializer<Acc>::Read(*source));
      std::string bytes;
      Serializer<Acc>::Write(acc, bytes);
      state->PutEntry(kState, into, bytes);
      state->RemoveEntry(kState, from);
    } else {
      throw std::logic_error("session windows merge accumulators: the aggregate needs "
                             "Merge(Accumulator& into, const Accumulator& from)");
    }
  }
};

// Window contents as the running value of a Reduce: reduce(const T&,
// const T&) -> T, then window_fn(key, window, value, out).
template <typename T, typename K, typename S, typename F, typename WindowFn>
struct ReduceContents {
  F reduce;
  WindowFn window_fn;

  static constexpr std::string_view kState = "weir.window.contents";
  void Add(WriteBackEntries* state, const std::string& window, const T& value) const {
    std::optional<std::string> stored = state->GetEntry(kState, window);
    std::string bytes;
    if (stored.has_value()) {
      S::Write(reduce(S::Read(*stored), value), bytes);
    } else {
      S::Write(value, bytes);
    }
    state->PutEntry(kState, window, bytes);
  }
  template <typename Out>
  void Fire(WriteBackEntries* state, const std::string& window, const K& key, const TimeWindow& w,
            Collector<Out>& out) const {
    std::optional<std::string> stored = state->GetEntry(kState, window);
    if (stored.has_value()) window_fn(key, w, S::Read(*stored), out);
  }
  void Purge(WriteBackEntries* state, const std::string& window) const { state->RemoveEntry(kState, window); }
  void Merge(WriteBackEntries* state, const std::string& into, const std::string& from) const {
    std::optional<std::string> source = state->GetEntry(kState, from);
    if (!source.has_value()) return;
    std::optional<std::string> target = state->GetEntry(kState, into);
    std::string bytes;
    if (target.has_value()) {
      S::Write(reduce(S::Read(*target), S::Read(*source)), bytes);
    } else {
      bytes = *source;
    }
    state->PutEntry(kState, into, bytes);
    state->RemoveEntry(kState, from);
  }
};

// Window contents as the records themselves, for a full-window function:
// entry <window> holds the count, <window><8-byte index> each record.
template <typename T, typename K, typename S, typename F>
struct ElementContents {
  F fn;

  static constexpr std::string_view kState = "weir.window.elements";
  static std::string Slot(const std::string& window, int64_t index) {
    std::string slot = window;
    AppendOrderedInt64(index, slot);
    return slot;
  }
  static int64_t Count(WriteBackEntries* state, const std::string& window) {
    std::optional<std::string> stored = state->GetEntry(kState, window);
    return stored.has_value() ? Serializer<int64_t>::Read(*stored) : 0;
  }
  void Add(WriteBackEntries* state, const std::string& window, const T& value) const {
    const int64_t count = Count(state, window);
    std::string bytes;
    S::Write(value, bytes);
    state->PutNewEntry(kState, Slot(window, count), bytes);
    bytes.clear();
    Serializer<int64_t>::Write(count + 1, bytes);
    state->PutEntry(kState, window, bytes);
  }
  template <typename Out>
  void Fire(WriteBackEntries* state, const std::string& window, const K& key, const TimeWindow& w,
            Collector<Out>& out) const {
    const int64_t count = Count(state, window);
    if (count == 0) return;
    std::vector<T> records;
    records.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      std::optional<std::string> stored = state->GetEntry(kState, Slot(window, i));
      if (!stored.has_value()) throw std::runtime_error("corrupt window state: a record of the window is missing");
      records.push_back(S::Read(*stored));
    }
    fn(key, w, records, out);
  }
  void Purge(WriteBackEntries* state, const std::string& window) const {
    const int64_t count = Count(state, window);
    for (int64_t i = 0; i < count; ++i) state->RemoveEntry(kState, Slot(window, i));
    state->RemoveEntry(kState, window);
  }
  void Merge(WriteBackEntries* state, const std::string& into, const std::string& from) const {
    const int64_t from_count = Count(state, from);
    int64_t count = Count(state, into);
    for (int64_t i = 0; i < from_count; ++i) {
      std::optional<std::string> stored = state->GetEntry(kState, Slot(from, i));
      if (!stored.has_value()) throw std::runtime_error("corrupt window state: a record of the window is missing");
      state->PutNewEntry(kState, Slot(into, count++), *stored);
    }
    std::string bytes;
    Serializer<int64_t>::Write(count, bytes);
    state->PutEntry(kState, into, bytes);
    Purge(state, from);
  }
};

// The window operator: per record, its windows' contents and timers; per
// timer, a firing (at the window's max_timestamp) or the purge (at
// max_timestamp + lateness; the same timer when lateness is 0).
template <typename T, typename K, typename KS, typename Out, typename Assigner, typename Contents>
class WindowOperator final : public OperatorBase {
 public:
  WindowOperator(std::function<K(const T&)> key_fn, Assigner assigner, int64_t lateness, Contents contents)
      : key_fn_(std::move(key_fn)), assigner_(assigner), lateness_(lateness), contents_(std::move(contents)) {}

  void Open(OperatorContext& context, RecordOutput* output) override {
    OperatorBase::Open(context, output);
    if (context.timers() == nullptr) throw std::logic_error("window operator without timers (not keyed?)");
    late_ = &context.metrics().counter("weir_window_late_records_total",
                                       "Records that came after their windows' allowed lateness (to the late-records "
                                       "side output when one is attached, else dropped).");
    late_output_ = context.side_output(1);
    fired_ = &context.metrics().counter("weir_window_fired_total", "Window results emitted.");
    contents_state_ = std::make_unique<WriteBackEntries>(&context, kCachedEntries);
  }

  // The changed window contents go into the keyed state's snapshot (the
  // chain snapshots keyed state after this) as pending entries.
  void SnapshotState(const CheckpointInfo&) override {
    if (contents_state_ != nullptr) contents_state_->HandOver();
  }

  void Process(void* record) override {
    const T& value = *static_cast<const T*>(record);
    const int64_t timestamp = context_->current_timestamp();
    if (timestamp == kNoTimestamp) {
      throw std::logic_error("window operator '" + context_->operator_name() +
                             "' got a record without event time; give its source a watermark strategy "
                             "(kafka::SourceOptions::watermarks or AssignTimestampsAndWatermarks)");
    }
    const K key = key_fn_(value);
    key_bytes_.clear();
    KS::Write(key, key_bytes_);
    context_->SetCurrentKey(key_bytes_);
    contents_state_->SetKey(key_bytes_);
    TimerService& timers = *context_->timers();
    const int64_t watermark = timers.CurrentWatermark();
    windows_.clear();
    AssignWindows(assigner_, timestamp, &windows_);
    if constexpr (std::is_same_v<Assigner, SessionWindows>) {
      if (!AddToSession(key, windows_[0], value, watermark)) Late(record, timestamp);
      return;
    }
    bool taken = false;
    for (const TimeWindow& w : windows_) {
      if (Cleanup(w) <= watermark) continue;  // past its lateness
      taken = true;
      const std::string ns = EncodeWindow(w);
      AddToWindow(key, w, ns, ns, value, watermark);
    }
    if (!taken) Late(record, timestamp);
  }

  void OnTimer(const FiredTimer& timer) override {
    if (timer.domain != TimeDomain::kEventTime) return;
    const TimeWindow w = DecodeWindow(timer.ns);
    std::string ns(timer.ns);
    contents_state_->SetKey(timer.key);  // the runtime set the context's
    if constexpr (std::is_same_v<Assigner, SessionWindows>) {
      // The session's contents live under its state window.
      std::optional<std::string> state_window = context_->keyed_state()->GetEntry(kSessions, ns);
      if (!state_window.has_value()) return;  // merged away (its timers were deleted)
      if (timer.time == w.max_timestamp()) Fire(KS::Read(timer.key), w, *state_window);
      if (timer.time == Cleanup(w)) {
        contents_.Purge(contents_state_.get(), *state_window);
        context_->keyed_state()->RemoveEntry(kSessions, ns);
      }
      return;
    }
    if (timer.time == w.max_timestamp()) Fire(KS::Read(timer.key), w, ns);
    if (timer.time == Cleanup(w)) contents_.Purge(contents_state_.get(), ns);
  }

 private:
  // Sessions: each session window of the current key -> the window under
  // which its contents are kept (that of the first session it grew from,
  // so merging moves only the others' contents).
  static constexpr std::string_view kSessions = "weir.window.sessions";

  void Late(void* record, int64_t timestamp) {
    late_->Inc();
    if (late_output_ != nullptr) late_output_->EmitAt(record, timestamp);
    // The metric alone is easy to miss, and whatever made records late
    // (a source back from idleness, a producer behind) is worth a line.
    ++late_unlogged_;
    const int64_t now = context_->timers()->CurrentProcessingTime();
    if (late_logged_ms_ != kNoTimestamp && now - late_logged_ms_ < kLateLogIntervalMs) return;
    late_logged_ms_ = now;
    context_->LogWarning("window operator '" + context_->operator_name() + "' subtask " +
                         std::to_string(context_->subtask_index()) + ": " + std::to_string(late_unlogged_) +
                         (late_unlogged_ == 1 ? " record" : " records") +
                         " came after their windows' allowed lateness since the last message (watermark at " +
                         std::to_string(context_->timers()->CurrentWatermark()) + " Unix ms, allowed lateness " +
                         std::to_string(lateness_) + " ms): " + (late_output_ != nullptr ? "sent to" : "dropped, no") +
                         " late-records output; counted in weir_window_late_records_total");
    late_unlogged_ = 0;
  }

  // Adds `value` to the session its `window` makes by merging with the
  // sessions it touches, unless that merged session is past its lateness;
  // returns whether it did. Lateness is judged on the merged session, as
  // Flink does: a record whose own window is past its lateness still counts
  // when it joins a session that is not.
  bool AddToSession(const K& key, TimeWindow window, const T& value, int64_t watermark) {
    KeyedStateStore* state = context_->keyed_state();
    std::vector<std::pair<std::string, std::string>> sessions = state->Entries(kSessions);
    // Sessions of one key never touch each other, so those the record's
    // window touches are the ones the merged window touches.
    std::erase_if(sessions, [&window](const std::pair<std::string, std::string>& session) {
      return !Touch(DecodeWindow(session.first), window);
    });
    for (const auto& [session_ns, session_state] : sessions) {
      const TimeWindow session = DecodeWindow(session_ns);
      window = TimeWindow{std::min(window.start, session.start), std::max(window.end, session.end)};
    }
    if (Cleanup(window) <= watermark) return false;
    // Merge: the sessions' timers and entries go; their contents join the
    // first merged session's.
    TimerService& timers = *context_->timers();
    std::string state_ns;
    for (const auto& [session_ns, session_state] : sessions) {
      const TimeWindow session = DecodeWindow(session_ns);
      timers.Delete(TimeDomain::kEventTime, session.max_timestamp(), session_ns);
      if (lateness_ > 0) timers.Delete(TimeDomain::kEventTime, Cleanup(session), session_ns);
      state->RemoveEntry(kSessions, session_ns);
      if (state_ns.empty()) {
        state_ns = session_state;
      } else {
        contents_.Merge(contents_state_.get(), state_ns, session_state);
      }
    }
    const std::string ns = EncodeWindow(window);
    if (state_ns.empty()) state_ns = ns;
    state->PutEntry(kSessions, ns, state_ns);
    AddToWindow(key, window, ns, state_ns, value, watermark);
    return true;
  }

  // Adds `value` to window `w` (timers under `ns`, contents under
  // `state_ns`); fires it at once when the watermark is past its end (a late
  // update within the lateness), else sets its timer; and its cleanup timer.
  void AddToWindow(const K& key, const TimeWindow& w, const std::string& ns, const std::string& state_ns,
                   const T& value, int64_t watermark) {
    TimerService& timers = *context_->timers();
    contents_.Add(contents_state_.get(), state_ns, value);
    if (w.max_timestamp() <= watermark) {
      Fire(key, w, state_ns);
    } else {
      timers.Register(TimeDomain::kEventTime, w.max_timestamp(), ns);
    }
    if (lateness_ > 0) timers.Register(TimeDomain::kEventTime, Cleanup(w), ns);
  }

  // When the window's state goes: end of lateness (saturating).
  int64_t Cleanup(const TimeWindow& w) const {
    return w.max_timestamp() > kMaxWatermark - lateness_ ? kMaxWatermark : w.max_timestamp() + lateness_;
  }
  void Fire(const K& key, const TimeWindow& w, const std::string& ns) {
    AtTimeOutput at(output_, w.max_timestamp());
    CountingCollector out(&at, fired_);
    contents_.Fire(contents_state_.get(), ns, key, w, out.collector);
  }
  // Counts the results a firing emits.
  struct CountingCollector {
    class Counted final : public RecordOutput {
     public:
      Counted(RecordOutput* next, Counter* counter) : next_(next), counter_(counter) {}
      void Emit(void* record) override {
        counter_->Inc();
        next_->Emit(record);
      }

     private:
      RecordOutput* const next_;
      Counter* const counter_;
    };
    CountingCollector(RecordOutput* next, Counter* counter) : counted(next, counter), collector(&counted) {}
    Counted counted;
    Collector<Out> collector;
  };

  const std::function<K(const T&)> key_fn_;
  const Assigner assigner_;
  const int64_t lateness_;
  const Contents contents_;
  std::vector<TimeWindow> windows_;
  std::string key_bytes_;
  Counter* late_ = nullptr;
  // Late records are logged at most once per kLateLogIntervalMs of
  // processing time: when the last line was, and the records since.
  static constexpr int64_t kLateLogIntervalMs = 10000;
  int64_t late_logged_ms_ = kNoTimestamp;
  int64_t late_unlogged_ = 0;
  Counter* fired_ = nullptr;
  RecordOutput* late_output_ = nullptr;  // side output 1, if consumed
  // The window contents' entries, through a write-back cache.
  static constexpr size_t kCachedEntries = 100000;
  std::unique_ptr<WriteBackEntries> contents_state_;
};

}  // namespace internal

// The results of a window (a DataStream<Out>), and its late records.
template <typename Out, typename In>
class WindowResult : public DataStream<Out> {
 public:
  WindowResult(DataStream<Out> results, const TypeOps* in_type) : DataStream<Out>(results), in_type_(in_type) {}

  // The records that came after their windows' allowed lateness, with their
  // event time (side output 1 of the window vertex). Without a consumer
  // they are dropped; either way weir_window_late_records_total counts them.
  DataStream<In> LateRecords() const {
    return DataStream<In>(this->env(), this->vertex_id(), Partitioning::kForward, {}, StreamSide{1, in_type_});
  }

 private:
  const TypeOps* in_type_;
};

// A keyed stream cut into event-time windows (KeyedStream::Window).
template <typename T, typename K, typename KS, typename Assigner>
class WindowedStream {
 public:
  WindowedStream(StreamEnvironment* env, int vertex, std::function<K(const T&)> key_fn, Assigner assigner,
                 StreamSide side = {})
      : env_(env), vertex_(vertex), key_fn_(std::move(key_fn)), assigner_(assigner), side_(side) {
    internal::CheckAssigner(assigner_);
  }

  // How long after a window fired a record may still come and update it
  // (the window fires again). Default 0: the window's state goes when it
  // fires.
  WindowedStream AllowedLateness(std::chrono::milliseconds lateness) const {
    if (lateness.count() < 0) throw std::invalid_argument("AllowedLateness: must not be negative");
    WindowedStream copy = *this;
    copy.lateness_ = lateness.count();
    return copy;
  }

  // One value per key and window: reduce(const T&, const T&) -> T.
  template <typename F, typename S = Serializer<T>>
  WindowResult<T, T> Reduce(F reduce) const {
    auto emit = [](const K&, const TimeWindow&, const T& value, Collector<T>& out) { out.Collect(value); };
    using Contents = internal::ReduceContents<T, K, S, F, decltype(emit)>;
    return Attach<T, S>("Window", Contents{std::move(reduce), emit});
  }

  // Incremental aggregation: Agg has Accumulator, Result, Create(),
  // Add(Accumulator&, const T&) and Get(const Accumulator&) (see
  // CountAggregate); emits Get's result per key and window.
  template <typename Agg, typename S = Serializer<typename Agg::Result>>
  WindowResult<typename Agg::Result, T> Aggregate(Agg agg) const {
    using R = typename Agg::Result;
    auto emit = [](const K&, const TimeWindow&, const R& result, Collector<R>& out) { out.Collect(result); };
    return Aggregate<R, S>(std::move(agg), emit);
  }

  // As Aggregate(agg), then window_fn(const K&, const TimeWindow&,
  // Agg::Result, Collector<Out>&) with the key and the window:
  // Aggregate<Out>(agg, window_fn).
  template <typename Out, typename S = Serializer<Out>, typename Agg, typename WindowFn>
  WindowResult<Out, T> Aggregate(Agg agg, WindowFn window_fn) const {
    using Contents = internal::AggregateContents<T, K, Agg, WindowFn>;
    return Attach<Out, S>("Window", Contents{std::move(agg), std::move(window_fn)});
  }

  // A full-window function: fn(const K&, const TimeWindow&, const
  // std::vector<T>&, Collector<Out>&) with every record of the window (kept
  // in state until it fires: prefer Aggregate where it will do).
  template <typename Out, typename S = Serializer<Out>, typename F, typename TS = Serializer<T>>
  WindowResult<Out, T> Process(F fn) const {
    using Contents = internal::ElementContents<T, K, TS, F>;
    return Attach<Out, S>("Window", Contents{std::move(fn)});
  }

 private:
  template <typename Out, typename S, typename Contents>
  WindowResult<Out, T> Attach(const char* name, Contents contents) const {
    auto key_fn = key_fn_;
    KeyFunction key = [key_fn](const void* record, std::string& out) {
      KS::Write(key_fn(*static_cast<const T*>(record)), out);
    };
    VertexSpec spec;
    spec.name = name;
    spec.output_type = TypeOpsOf<Out, S>();
    spec.input_key = key;
    spec.properties[std::string(kEventTimeProperty)] = "required";
    const Assigner assigner = assigner_;
    const int64_t lateness = lateness_;
    spec.operator_factory = [key_fn, assigner, lateness, contents] {
      return std::make_unique<internal::WindowOperator<T, K, KS, Out, Assigner, Contents>>(key_fn, assigner,
                                                                                            lateness, contents);
    };
    DataStream<T> upstream(env_, vertex_, Partitioning::kHash, key, side_);
    return WindowResult<Out, T>(DataStream<Out>(env_, upstream.Attach(std::move(spec))), upstream.type());
  }

  StreamEnvironment* env_;
  int vertex_;
  std::function<K(const T&)> key_fn_;
  Assigner assigner_;
  StreamSide side_;
  int64_t lateness_ = 0;
};

template <typename T, typename K, typename KS>
template <typename Assigner>
WindowedStream<T, K, KS, Assigner> KeyedStream<T, K, KS>::Window(Assigner assigner) const {
  return WindowedStream<T, K, KS, Assigner>(env_, vertex_, key_fn_, assigner, side_);
}

}  // namespace weir
