// The runtime's view of an operator: the type-erased interfaces that the
// typed DataStream API (datastream.h) implements inside a job binary and the
// TaskManager drives. Job authors do not implement these directly.
//
// Records travel as `void*` pointing at a value of the edge's C++ type; the
// typed API guarantees that both ends agree on that type. A receiver may move
// from the value.
//
// Lifecycle of an operator instance, all on its task thread:
//   InitializeState   register operator state (restored when the task
//                     starts from a checkpoint) — before Open
//   Open
//   Process / PollNext (OnIdle whenever the input runs dry), and between
//   two records, per checkpoint n:
//     PrepareSnapshotPreBarrier(n)  emit or flush what must precede barrier n
//                                   (sinks flush here)
//     SnapshotState(n)              bring operator state up to date for n
//     NotifyCheckpointComplete(n)   n is durable everywhere (e.g. commit)
//     NotifyCheckpointAborted(n)    n will never complete
//   EndInput (bounded input only), Close
// Keyed state needs no hook: the runtime snapshots and restores it.
//
// Threading: one task thread calls every method of an operator instance.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weir/metrics.h"

namespace weir {

// Event time (Unix ms) of a record that has none.
inline constexpr int64_t kNoTimestamp = INT64_MIN;
// The smallest and the largest watermark: nothing is known yet, and the
// input has ended (every event-time window may fire).
inline constexpr int64_t kMinWatermark = INT64_MIN;
inline constexpr int64_t kMaxWatermark = INT64_MAX;

// Thrown by an operator (or any user code) for a failure that restarting
// cannot fix, such as output that is already lost: the job then FAILS at
// once, whatever its restart strategy, with this message. Any other
// exception fails the attempt and the job restarts under its strategy.
class UnrecoverableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where an operator sends its output records. A record emitted with Emit
// keeps the event time of the record being processed (none at a source).
class RecordOutput {
 public:
  virtual ~RecordOutput() = default;
  virtual void Emit(void* record) = 0;
  // Emits `record` with event time `timestamp` (Unix ms).
  virtual void EmitAt(void* record, int64_t timestamp) { Emit(record); }
  // Event time reached `watermark`: no later record has a timestamp at or
  // below it. Sources (their watermark strategy) send these; operators
  // pass them on through StreamOperator::OnWatermark.
  virtual void EmitWatermark(int64_t watermark) {}
  // The stream is idle (sends nothing for now: leave it out of event time
  // downstream) or active again.
  virtual void EmitWatermarkStatus(bool idle) {}
};

// Keyed state of one operator instance, for the key of the record being
// processed. Values are bytes; ValueState, ListState, MapState and
// ReducingState (state.h) add the types.
//
// A state name holds one kind of state: a value (Get/Put/Append/Remove) or
// a map (the *Entry calls). Using one name both ways is undefined.
class KeyedStateStore {
 public:
  virtual ~KeyedStateStore() = default;
  virtual std::optional<std::string> Get(std::string_view state_name) = 0;
  virtual void Put(std::string_view state_name, std::string_view value) = 0;
  // Appends `bytes` to the value (creating it when absent); ListState
  // appends one framed element this way, without reading the list.
  virtual void Append(std::string_view state_name, std::string_view bytes) = 0;
  virtual void Remove(std::string_view state_name) = 0;

  // Map state: one value per user key, under the current key.
  virtual std::optional<std::string> GetEntry(std::string_view state_name, std::string_view user_key) = 0;
  virtual void PutEntry(std::string_view state_name, std::string_view user_key, std::string_view value) = 0;
  virtual void RemoveEntry(std::string_view state_name, std::string_view user_key) = 0;
  // Every entry of the current key's map, ordered by user-key bytes.
  virtual std::vector<std::pair<std::string, std::string>> Entries(std::string_view state_name) = 0;
  virtual void ClearEntries(std::string_view state_name) = 0;

  // Between the two, writes (Put, Append, Remove, PutEntry, RemoveEntry) may
  // be applied together at CommitWriteBatch — much cheaper for many writes
  // in RocksDB — and reads may not see them yet: for writing back many
  // entries at once. Default: each write applies at once.
  virtual void StartWriteBatch() {}
  virtual void CommitWriteBatch() {}

  // For a write-back cache in front of the state, from SnapshotState: an
  // entry of map state `state_name` under `key` (as the key_by serialized
  // it) that the cache holds and the state may not; `value` null when the
  // cache removed it. The state does not change: the snapshot taken next
  // keeps a copy of the entry beside it, and a restore applies the entry on
  // top — so the synchronous part of a checkpoint copies bytes instead of
  // writing them into RocksDB. The runtime's keyed state takes these;
  // other stores refuse them.
  virtual void AddPendingEntry(std::string_view key, std::string_view state_name, std::string_view user_key,
                               const std::string* value) {
    throw std::logic_error("this keyed state store takes no pending entries");
  }
};

// A list of byte strings kept per operator instance in checkpoints
// (operator state, e.g. a source's partition offsets). What it holds when a
// checkpoint's SnapshotState returns is what the checkpoint stores.
class OperatorListState {
 public:
  virtual ~OperatorListState() = default;
  // The entries: those restored at start, then whatever Update/Add made them.
  virtual const std::vector<std::string>& Get() const = 0;
  virtual void Update(std::vector<std::string> entries) = 0;
  virtual void Add(std::string entry) = 0;
  virtual void Clear() = 0;
};

// The operator state of one operator instance; reached through
// OperatorContext::operator_state() in InitializeState.
class OperatorStateStore {
 public:
  virtual ~OperatorStateStore() = default;
  // List state `name`. On restore at any parallelism, the entries of all
  // subtasks are split among the new subtasks (each entry goes to exactly
  // one) — use it for work that can move, like Kafka partitions.
  virtual OperatorListState* GetListState(std::string_view name) = 0;
  // Union list state `name`: on restore every subtask gets every entry of
  // every subtask, and picks what it needs.
  virtual OperatorListState* GetUnionListState(std::string_view name) = 0;
};

enum class TimeDomain {
  kEventTime,       // fires once the watermark reaches the time
  kProcessingTime,  // fires once the wall clock (Unix ms) reaches it
};

// A timer that fired, given to StreamOperator::OnTimer. The key (as
// serialized by the key_by) is also the current key of the keyed state
// then; `ns` is what the operator registered it with (e.g. a window).
struct FiredTimer {
  TimeDomain domain = TimeDomain::kEventTime;
  int64_t time = 0;
  std::string_view key;
  std::string_view ns;
};

// The timers of a keyed operator (OperatorContext::timers()). They belong
// to the current key, are kept in the keyed state backend, and are part of
// every checkpoint: restored, and rescaled by key group, with the keyed
// state. A timer is identified by (domain, time, key, ns): registering it
// again does nothing. Event-time timers fire in time order when a watermark
// at or above their time reaches the operator (before the watermark goes
// on); processing-time timers when the wall clock reaches them. Both fire
// on the task thread between records, through StreamOperator::OnTimer.
class TimerService {
 public:
  virtual ~TimerService() = default;
  virtual void Register(TimeDomain domain, int64_t time, std::string_view ns = {}) = 0;
  virtual void Delete(TimeDomain domain, int64_t time, std::string_view ns = {}) = 0;
  // The last watermark that reached the operator (kMinWatermark before
  // the first).
  virtual int64_t CurrentWatermark() const = 0;
  // The wall clock, Unix ms.
  virtual int64_t CurrentProcessingTime() const = 0;
};

// Identifies a checkpoint to the operators.
struct CheckpointInfo {
  int64_t checkpoint_id = 0;
  // When the JobManager triggered it (Unix ms).
  int64_t timestamp_ms = 0;
};

// What the runtime tells an operator instance about itself.
class OperatorContext {
 public:
  virtual ~OperatorContext() = default;
  virtual const std::string& operator_name() const = 0;
  virtual int subtask_index() const = 0;
  virtual int parallelism() const = 0;
  // Keyed state; nullptr unless the operator follows a key_by.
  virtual KeyedStateStore* keyed_state() = 0;
  // Sets the key whose state keyed_state() reads and writes.
  virtual void SetCurrentKey(std::string_view key_bytes) = 0;
  // A job-level configuration value (-Dkey=value at submission), or fallback.
  virtual std::string JobConfig(std::string_view key, std::string_view fallback) const = 0;
  // Operator state of this instance; never null.
  virtual OperatorStateStore* operator_state() = 0;
  // True when the task started from a checkpoint (its state was restored).
  virtual bool is_restored() const = 0;
  // Counters and gauges this operator exports (weir/metrics.h).
  virtual MetricGroup& metrics() = 0;
  // The event time of the record being processed (kNoTimestamp if none).
  virtual int64_t current_timestamp() const { return kNoTimestamp; }
  // The timers of a keyed operator; nullptr unless it follows a key_by.
  virtual TimerService* timers() { return nullptr; }
  // Where side output `id` (> 0) of this operator goes, or nullptr when
  // nothing consumes it (its records are then dropped).
  virtual RecordOutput* side_output(int id) { return nullptr; }
  // Read in EndInput: whether a checkpoint taken after the end of input
  // completes before the task ends (its final checkpoint: a job with an
  // exactly-once sink and checkpoints). A transactional sink then leaves
  // what it holds to that checkpoint, which pre-commits it and commits it on
  // completion; otherwise (e.g. after a stop-with-savepoint) it commits it
  // in EndInput, as no checkpoint follows.
  virtual bool checkpoint_follows_end_of_input() const { return false; }
  // Writes `message` to the TaskManager's log as a warning, with the task's
  // ids. For what the user must hear of (records dropped); the caller keeps
  // it rare (rate-limited), never a line per record.
  virtual void LogWarning(std::string_view message) {}
};

// The checkpoint hooks every operator has (see the lifecycle above).
class CheckpointListener {
 public:
  virtual ~CheckpointListener() = default;
  // Before Open: get operator state from context.operator_state().
  virtual void InitializeState(OperatorContext& context) {}
  // Barrier `checkpoint_id` is about to leave this operator: emit what must
  // precede it, and flush what the checkpoint must cover.
  virtual void PrepareSnapshotPreBarrier(int64_t checkpoint_id) {}
  // Bring operator state up to date for `checkpoint`; keep it short (it runs
  // while the task's input waits).
  virtual void SnapshotState(const CheckpointInfo& checkpoint) {}
  virtual void NotifyCheckpointComplete(int64_t checkpoint_id) {}
  virtual void NotifyCheckpointAborted(int64_t checkpoint_id) {}
};

// An operator with one input.
class StreamOperator : public CheckpointListener {
 public:
  virtual void Open(OperatorContext& context, RecordOutput* output) = 0;
  virtual void Process(void* record) = 0;
  // Every input has ended (bounded jobs): emit what is pending and flush.
  virtual void EndInput() {}
  // The task has nothing to process right now and is about to wait for
  // input: send what is buffered (a sink that batches writes flushes here),
  // so that output never waits for the next record or barrier.
  virtual void OnIdle() {}
  // Event time reached `watermark` at this operator's input; returns the
  // watermark to pass on (kMinWatermark: none). Called between records.
  virtual int64_t OnWatermark(int64_t watermark) { return watermark; }
  // Called every pipeline.auto-watermark-interval (50 ms) of processing
  // time, between records: where a watermark strategy emits.
  virtual void OnPeriodicEmit() {}
  // A timer of this operator fired (keyed operators; TimerService). The
  // current key is the timer's, and records emitted carry the timer's time
  // as their event time (event-time timers) or none (processing time).
  virtual void OnTimer(const FiredTimer& timer) {}
  virtual void Close() {}
};

enum class SourceStatus {
  kMoreAvailable,     // call PollNext again at once
  kNothingAvailable,  // nothing now; the runtime may wait a little
  kEndOfInput,        // bounded source finished
};

// A source: produces records when polled by its task thread. Checkpoints
// happen between two PollNext calls; SnapshotState records the position
// reached (e.g. offsets) so that a restore continues from it.
class SourceOperator : public CheckpointListener {
 public:
  virtual void Open(OperatorContext& context, RecordOutput* output) = 0;
  virtual SourceStatus PollNext() = 0;
  // As StreamOperator::OnPeriodicEmit, between two PollNext calls.
  virtual void OnPeriodicEmit() {}
  virtual void Close() {}
};

// How the runtime handles a record type without knowing it.
struct TypeOps {
  std::string name;
  void (*serialize)(const void* record, std::string& out);
  // Deserializes one record and emits it to `output`.
  void (*deserialize_to)(std::string_view bytes, RecordOutput& output);
};

}  // namespace weir
