// The DataStream API: a typed, fluent way to describe a dataflow.
//
//   auto words = kafka::Source(env, {.brokers = b, .topics = {"in"}});
//   auto counts = words.KeyBy([](const kafka::Record& r) { return r.value; })
//                      .Process<kafka::Record>(CountPerKey);
//   kafka::Sink(counts, {.brokers = b, .topic = "out"});
//
// Every call adds a vertex to the job graph; Name() and Parallelism() set the
// last one's. Adjacent vertices with the same parallelism and a forward
// connection run chained in one task and pass records as C++ objects;
// elsewhere records are serialized with their type's weir::Serializer.
//
// User functions run on the task thread of their subtask; an exception they
// throw fails the task with its message.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "weir/event_time.h"
#include "weir/job_graph.h"
#include "weir/operator.h"
#include "weir/serializer.h"
#include "weir/state.h"
#include "weir/two_phase_commit.h"
#include "weir/write_ahead.h"

namespace weir {

// The TypeOps of T written with serializer S (one instance per job binary).
template <typename T, typename S = Serializer<T>>
const TypeOps* TypeOpsOf() {
  static const TypeOps ops{
      typeid(T).name(),
      [](const void* record, std::string& out) { S::Write(*static_cast<const T*>(record), out); },
      [](std::string_view bytes, RecordOutput& output) {
        T value = S::Read(bytes);
        output.Emit(&value);
      }};
  return &ops;
}

// Receives the records a FlatMap or Process function emits.
template <typename T>
class Collector {
 public:
  explicit Collector(RecordOutput* output) : output_(output) {}
  void Collect(T value) { output_->Emit(&value); }
  // With its event time (Unix ms; weir/event_time.h).
  void CollectAt(T value, int64_t timestamp) { output_->EmitAt(&value, timestamp); }

 private:
  RecordOutput* output_;
};

// A timer firing, as KeyedStream::Process's on_timer sees it.
struct TimerInfo {
  int64_t time = 0;
  TimeDomain domain = TimeDomain::kEventTime;
};

// What Map, Filter, FlatMap and Sink functions may take as their last
// argument: fn(T, RuntimeContext&) -> Out, fn(const T&, RuntimeContext&),
// fn(T, Collector<Out>&, RuntimeContext&), fn(const T&, RuntimeContext&).
// Functions without it work as before.
class RuntimeContext {
 public:
  explicit RuntimeContext(OperatorContext* context = nullptr) : context_(context) {}
  const std::string& operator_name() const { return context_->operator_name(); }
  int subtask_index() const { return context_->subtask_index(); }
  int parallelism() const { return context_->parallelism(); }
  // A job-level configuration value (-Dkey=value at submission, or
  // StreamEnvironment::SetConfig), or fallback.
  std::string JobConfig(std::string_view key, std::string_view fallback) const {
    return context_->JobConfig(key, fallback);
  }
  // This operator's counters and gauges (weir/metrics.h); ask once per name
  // and keep the reference.
  MetricGroup& metrics() { return context_->metrics(); }
  // The event time of the record being processed (kNoTimestamp if none).
  int64_t timestamp() const { return context_->current_timestamp(); }

 private:
  OperatorContext* context_;
};

// What a keyed Process function sees besides the record.
template <typename K>
class KeyedContext {
 public:
  // `timers`: the Process call has an on_timer function to fire them into.
  KeyedContext(const K& key, OperatorContext* context, bool timers = false)
      : key_(key), context_(context), timers_(timers) {}
  const K& key() const { return key_; }
  // The event time of the record being processed, or the time of the
  // event-time timer firing (kNoTimestamp: none).
  int64_t timestamp() const { return context_->current_timestamp(); }
  // The operator's event time: the last watermark that reached it
  // (kMinWatermark before the first).
  int64_t CurrentWatermark() { return Timers().CurrentWatermark(); }
  // The wall clock, Unix ms.
  int64_t CurrentProcessingTime() { return Timers().CurrentProcessingTime(); }
  // Timers of the current key (weir::TimerService): on_timer is called
  // once the watermark (event time) or the wall clock (processing time)
  // reaches `time`. Registering a timer that exists does nothing.
  void RegisterEventTimeTimer(int64_t time) { Timers().Register(TimeDomain::kEventTime, time); }
  void DeleteEventTimeTimer(int64_t time) { Timers().Delete(TimeDomain::kEventTime, time); }
  void RegisterProcessingTimeTimer(int64_t time) { Timers().Register(TimeDomain::kProcessingTime, time); }
  void DeleteProcessingTimeTimer(int64_t time) { Timers().Delete(TimeDomain::kProcessingTime, time); }
  int subtask_index() const { return context_->subtask_index(); }
  // This operator's counters and gauges (weir/metrics.h); ask once per name
  // and keep the reference in the function object (a mutable lambda's
  // capture), never in a static: it lives as long as the task.
  MetricGroup& metrics() { return context_->metrics(); }
  // A job-level configuration value (-Dkey=value at submission), or fallback.
  std::string JobConfig(std::string_view key, std::string_view fallback) const {
    return context_->JobConfig(key, fallback);
  }
  // The state named `name` of the current key.
  template <typename V, typename S = Serializer<V>>
  ValueState<V, S> State(std::string name) {
    return ValueState<V, S>(context_->keyed_state(), UserStateName(std::move(name)));
  }
  template <typename V, typename S = Serializer<V>>
  weir::ListState<V, S> ListState(std::string name) {
    return weir::ListState<V, S>(context_->keyed_state(), UserStateName(std::move(name)));
  }
  template <typename UK, typename UV, typename KS = Serializer<UK>, typename VS = Serializer<UV>>
  weir::MapState<UK, UV, KS, VS> MapState(std::string name) {
    return weir::MapState<UK, UV, KS, VS>(context_->keyed_state(), UserStateName(std::move(name)));
  }
  template <typename V, typename S = Serializer<V>>
  weir::ReducingState<V, S> ReducingState(std::string name,
                                          typename weir::ReducingState<V, S>::ReduceFunction reduce) {
    return weir::ReducingState<V, S>(context_->keyed_state(), UserStateName(std::move(name)), std::move(reduce));
  }

 private:
  // Names starting "weir." hold the runtime's own keyed state (timers,
  // window contents): a user's state there would corrupt them.
  static std::string UserStateName(std::string name) {
    if (std::string_view(name).substr(0, 5) == "weir.") {
      throw std::invalid_argument("keyed state name '" + name +
                                  "' is reserved: names starting 'weir.' hold the runtime's own state (timers, "
                                  "windows); choose another name");
    }
    return name;
  }

  TimerService& Timers() {
    if (!timers_ || context_->timers() == nullptr) {
      throw std::logic_error("operator '" + context_->operator_name() +
                             "' uses timers, but its KeyedStream::Process has no on_timer function to call when they "
                             "fire; use Process(fn, on_timer)");
    }
    return *context_->timers();
  }

  const K& key_;
  OperatorContext* context_;
  const bool timers_;
};

// A user-defined source, polled by its task thread. To resume where it was
// after a failure, it keeps its position in operator state: register it in
// InitializeState (context.operator_state(), see OperatorList in state.h) and
// bring it up to date in SnapshotState; checkpoints happen between polls.
template <typename T>
class SourceFunction {
 public:
  virtual ~SourceFunction() = default;
  virtual void InitializeState(OperatorContext& context) {}
  virtual void Open(OperatorContext& context) {}
  // Emit some records (or none) and say whether more will come.
  virtual SourceStatus Poll(Collector<T>& out) = 0;
  virtual void SnapshotState(const CheckpointInfo& checkpoint) {}
  virtual void NotifyCheckpointComplete(int64_t checkpoint_id) {}
  virtual void NotifyCheckpointAborted(int64_t checkpoint_id) {}
  virtual void Close() {}
};

namespace internal {

// `name` with every character other than letters, digits, '.', '_' and '-'
// replaced by '_': a default name for transactions a sink names after
// itself.
inline std::string LegalName(std::string name) {
  for (char& c : name) {
    const bool legal = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                       c == '_' || c == '-';
    if (!legal) c = '_';
  }
  return name;
}

// The result of fn(args..., RuntimeContext&) when fn takes the context,
// else of fn(args...).
template <typename F, typename... Args>
using ResultWithContext =
    typename std::conditional_t<std::is_invocable_v<F, Args..., RuntimeContext&>,
                                std::invoke_result<F, Args..., RuntimeContext&>, std::invoke_result<F, Args...>>::type;

// Calls fn(args..., context) when fn takes the context, else fn(args...).
template <typename F, typename... Args>
decltype(auto) CallWithContext(F& fn, RuntimeContext& context, Args&&... args) {
  if constexpr (std::is_invocable_v<F&, Args&&..., RuntimeContext&>) {
    return fn(std::forward<Args>(args)..., context);
  } else {
    return fn(std::forward<Args>(args)...);
  }
}

// Base of the typed operators below: keeps the output and context.
class OperatorBase : public StreamOperator {
 public:
  void Open(OperatorContext& context, RecordOutput* output) override {
    context_ = &context;
    runtime_ = RuntimeContext(&context);
    output_ = output;
  }

 protected:
  OperatorContext* context_ = nullptr;
  RuntimeContext runtime_;
  RecordOutput* output_ = nullptr;
};

template <typename In, typename Out, typename F>
class MapOperator final : public OperatorBase {
 public:
  explicit MapOperator(F fn) : fn_(std::move(fn)) {}
  void Process(void* record) override {
    Out out = CallWithContext(fn_, runtime_, std::move(*static_cast<In*>(record)));
    output_->Emit(&out);
  }

 private:
  F fn_;
};

template <typename In, typename F>
class FilterOperator final : public OperatorBase {
 public:
  explicit FilterOperator(F fn) : fn_(std::move(fn)) {}
  void Process(void* record) override {
    if (CallWithContext(fn_, runtime_, *static_cast<const In*>(record))) output_->Emit(record);
  }

 private:
  F fn_;
};

template <typename In, typename Out, typename F>
class FlatMapOperator final : public OperatorBase {
 public:
  explicit FlatMapOperator(F fn) : fn_(std::move(fn)) {}
  void Process(void* record) override {
    Collector<Out> out(output_);
    CallWithContext(fn_, runtime_, std::move(*static_cast<In*>(record)), out);
  }

 private:
  F fn_;
};

// TimerFn is std::nullptr_t for a Process without timers.
template <typename In, typename K, typename KS, typename Out, typename KeyFn, typename F, typename TimerFn = std::nullptr_t>
class KeyedProcessOperator final : public OperatorBase {
 public:
  static constexpr bool kTimers = !std::is_same_v<TimerFn, std::nullptr_t>;

  KeyedProcessOperator(KeyFn key_fn, F fn, TimerFn on_timer = nullptr)
      : key_fn_(std::move(key_fn)), fn_(std::move(fn)), on_timer_(std::move(on_timer)) {}
  void Process(void* record) override {
    const In& in = *static_cast<const In*>(record);
    K key = key_fn_(in);
    key_bytes_.clear();
    KS::Write(key, key_bytes_);
    context_->SetCurrentKey(key_bytes_);
    KeyedContext<K> keyed(key, context_, kTimers);
    Collector<Out> out(output_);
    fn_(in, keyed, out);
  }
  void OnTimer(const FiredTimer& timer) override {
    if constexpr (kTimers) {
      // The runtime has set the timer's key as the current key.
      const K key = KS::Read(timer.key);
      KeyedContext<K> keyed(key, context_, true);
      Collector<Out> out(output_);
      on_timer_(TimerInfo{timer.time, timer.domain}, keyed, out);
    }
  }

 private:
  KeyFn key_fn_;
  F fn_;
  TimerFn on_timer_;
  std::string key_bytes_;
};

template <typename In, typename F>
class SinkFunctionOperator final : public OperatorBase {
 public:
  explicit SinkFunctionOperator(F fn) : fn_(std::move(fn)) {}
  void Process(void* record) override { CallWithContext(fn_, runtime_, *static_cast<const In*>(record)); }

 private:
  F fn_;
};

// AssignTimestampsAndWatermarks: gives each record its event time (the
// strategy's extractor, or the time it carries), checks it, and emits the
// watermark every periodic tick. Watermarks from upstream are not passed on
// (this operator's replace them), except the end of event time.
template <typename T>
class TimestampsAndWatermarksOperator final : public OperatorBase {
 public:
  explicit TimestampsAndWatermarksOperator(WatermarkStrategy<T> strategy)
      : strategy_(std::move(strategy)),
        watermarks_(strategy_.out_of_orderness.count(), strategy_.idleness.count()) {}

  void Open(OperatorContext& context, RecordOutput* output) override {
    OperatorBase::Open(context, output);
    split_ = watermarks_.AddSplit(context.operator_name(), WallClockMs());
    dropped_ = &context.metrics().counter("weir_event_time_dropped_records_total",
                                          "Records dropped for an invalid event time (missing, negative, or "
                                          "too far in the future).");
  }
  void Process(void* record) override {
    const T& value = *static_cast<const T*>(record);
    const int64_t timestamp = strategy_.timestamp ? strategy_.timestamp(value) : context_->current_timestamp();
    const int64_t now = WallClockMs();
    const std::string invalid = CheckTimestamp(timestamp, now, strategy_.max_future);
    if (!invalid.empty()) {
      if (strategy_.invalid_timestamps == InvalidTimestamps::kDrop) {
        dropped_->Inc();
        watermarks_.OnRecord(split_, kNoTimestamp, now);
        return;
      }
      throw UnrecoverableError("event time of operator '" + context_->operator_name() + "': " + invalid +
                               "; fix the timestamps, or set the watermark strategy's invalid_timestamps to "
                               "kDrop to drop such records");
    }
    watermarks_.OnRecord(split_, timestamp, now);
    output_->EmitAt(record, timestamp);
  }
  int64_t OnWatermark(int64_t watermark) override {
    return watermark == kMaxWatermark && emitter_.End() ? watermark : kMinWatermark;
  }
  void OnPeriodicEmit() override { emitter_.Emit(watermarks_.Combine(WallClockMs()), output_); }
  // Bounded input: every event-time window may fire.
  void EndInput() override {
    if (emitter_.End()) output_->EmitWatermark(kMaxWatermark);
  }

 private:
  const WatermarkStrategy<T> strategy_;
  SplitWatermarks watermarks_;
  int split_ = 0;
  WatermarkEmitter emitter_;
  Counter* dropped_ = nullptr;
};

template <typename T>
class SourceFunctionOperator final : public SourceOperator {
 public:
  explicit SourceFunctionOperator(std::unique_ptr<SourceFunction<T>> fn) : fn_(std::move(fn)) {}
  void InitializeState(OperatorContext& context) override { fn_->InitializeState(context); }
  void SnapshotState(const CheckpointInfo& checkpoint) override { fn_->SnapshotState(checkpoint); }
  void NotifyCheckpointComplete(int64_t checkpoint_id) override { fn_->NotifyCheckpointComplete(checkpoint_id); }
  void NotifyCheckpointAborted(int64_t checkpoint_id) override { fn_->NotifyCheckpointAborted(checkpoint_id); }
  void Open(OperatorContext& context, RecordOutput* output) override {
    output_ = output;
    fn_->Open(context);
  }
  SourceStatus PollNext() override {
    Collector<T> out(output_);
    return fn_->Poll(out);
  }
  void Close() override { fn_->Close(); }

 private:
  std::unique_ptr<SourceFunction<T>> fn_;
  RecordOutput* output_ = nullptr;
};

}  // namespace internal

template <typename T>
class DataStream;

// Where a job's dataflow starts: sources are added here.
class StreamEnvironment {
 public:
  explicit StreamEnvironment(JobGraph* graph) : graph_(graph) {}

  void SetJobName(std::string name) { graph_->name = std::move(name); }

  // Job-level configuration from the job's code: a job-level key of the
  // configuration reference (execution.checkpointing.*, restart-strategy.*,
  // state.backend.type, ...) or a key of the job's own, read in operators
  // with OperatorContext::JobConfig. `weir submit -Dkey=value` overrides it;
  // the cluster's configuration is the default for what neither sets.
  void SetConfig(std::string key, std::string value) { graph_->config[std::move(key)] = std::move(value); }

  // Checkpoint barriers aligned (kExactlyOnce, the default: keyed and
  // operator state reflect every record exactly once) or not (kAtLeastOnce:
  // no input is held back for a barrier, and after a restore a record may
  // count twice in state). Jobs with an exactly-once sink need kExactlyOnce.
  // Same as SetConfig("execution.checkpointing.mode", ...).
  enum class CheckpointingMode { kExactlyOnce, kAtLeastOnce };
  void SetCheckpointingMode(CheckpointingMode mode) {
    SetConfig("execution.checkpointing.mode", mode == CheckpointingMode::kExactlyOnce ? "EXACTLY_ONCE" : "AT_LEAST_ONCE");
  }

  template <typename T, typename S = Serializer<T>>
  DataStream<T> AddSource(std::string name, std::function<std::unique_ptr<SourceFunction<T>>()> factory);

  // Low-level: used by the typed API and the connectors.
  int AddVertex(VertexSpec vertex) {
    vertex.id = static_cast<int>(graph_->vertices.size());
    graph_->vertices.push_back(std::move(vertex));
    return graph_->vertices.back().id;
  }
  void AddEdge(int source, int target, Partitioning partitioning, KeyFunction key, int side_output = 0,
               const TypeOps* type = nullptr) {
    graph_->edges.push_back(EdgeSpec{source, target, partitioning, std::move(key), side_output, type});
  }
  VertexSpec& vertex(int id) { return graph_->vertices.at(id); }

 private:
  JobGraph* graph_;
};

template <typename T, typename K, typename KS>
class KeyedStream;

// Which output of a vertex a stream is: the main one (id 0), or side output
// `id` with records of `type` (e.g. a window's late records).
struct StreamSide {
  int id = 0;
  const TypeOps* type = nullptr;
};

// A sink added to the graph: sets its id (DataStream::Uid says why).
class SinkHandle {
 public:
  SinkHandle(StreamEnvironment* env, int vertex) : env_(env), vertex_(vertex) {}
  SinkHandle& Uid(std::string uid) {
    if (uid.empty()) throw std::invalid_argument("an operator id must not be empty");
    env_->vertex(vertex_).uid = std::move(uid);
    return *this;
  }

 private:
  StreamEnvironment* env_;
  int vertex_;
};

template <typename T>
class DataStream {
 public:
  DataStream(StreamEnvironment* env, int vertex, Partitioning next = Partitioning::kForward, KeyFunction key = {},
             StreamSide side = {})
      : env_(env), vertex_(vertex), next_(next), key_(std::move(key)), side_(side) {}

  // Names the vertex that produces this stream (shown in weir status).
  DataStream& Name(std::string name) {
    env_->vertex(vertex_).name = std::move(name);
    return *this;
  }
  // Sets the id of the vertex that produces this stream: its state is kept
  // under it in checkpoints and savepoints, and a changed job (operators
  // added or removed, chained otherwise) restores it by it. Without one the
  // id is the vertex's name ("<name>#2" for the second of a name), which a
  // rename changes. Unique within a job; not empty.
  DataStream& Uid(std::string uid) {
    if (uid.empty()) throw std::invalid_argument("an operator id must not be empty");
    env_->vertex(vertex_).uid = std::move(uid);
    return *this;
  }
  // Sets how many parallel subtasks run the vertex that produces this stream.
  DataStream& Parallelism(int parallelism) {
    if (parallelism < 1) throw std::invalid_argument("parallelism must be at least 1");
    env_->vertex(vertex_).parallelism = parallelism;
    return *this;
  }

  // One output record per input record: fn(T) -> Out, or
  // fn(T, RuntimeContext&) -> Out.
  template <typename F, typename Out = std::decay_t<internal::ResultWithContext<F, T>>, typename S = Serializer<Out>>
  DataStream<Out> Map(F fn) const {
    return Then<Out>("Map", TypeOpsOf<Out, S>(), [fn] {
      return std::make_unique<internal::MapOperator<T, Out, F>>(fn);
    });
  }

  // Keeps the records for which fn(const T&) (or fn(const T&,
  // RuntimeContext&)) is true.
  template <typename F>
  DataStream<T> Filter(F fn) const {
    return Then<T>("Filter", type(), [fn] {
      return std::make_unique<internal::FilterOperator<T, F>>(fn);
    });
  }

  // Any number of output records per input: fn(T, Collector<Out>&), or
  // fn(T, Collector<Out>&, RuntimeContext&).
  template <typename Out, typename S = Serializer<Out>, typename F>
  DataStream<Out> FlatMap(F fn) const {
    return Then<Out>("FlatMap", TypeOpsOf<Out, S>(), [fn] {
      return std::make_unique<internal::FlatMapOperator<T, Out, F>>(fn);
    });
  }

  // Partitions by key: records with equal keys reach the same subtask, where
  // a Process function keeps state per key. fn(const T&) -> K.
  template <typename F, typename K = std::decay_t<std::invoke_result_t<F, const T&>>, typename KS = Serializer<K>>
  KeyedStream<T, K, KS> KeyBy(F key_fn) const {
    return KeyedStream<T, K, KS>(env_, vertex_, key_fn, side_);
  }

  // Event time: each record's timestamp and this stream's watermarks from
  // `strategy` (weir/event_time.h). Runs chained after this stream's vertex
  // (same parallelism); everything downstream carries event time.
  // Throws std::invalid_argument for a negative duration, or for max_drift,
  // which aligns a Kafka source's partitions (kafka::SourceOptions::
  // watermarks) and has nothing to pause here.
  DataStream<T> AssignTimestampsAndWatermarks(WatermarkStrategy<T> strategy) const {
    if (strategy.out_of_orderness.count() < 0 || strategy.idleness.count() < 0 || strategy.max_future.count() < 0) {
      throw std::invalid_argument(
          "AssignTimestampsAndWatermarks: a watermark strategy's durations must not be negative");
    }
    if (strategy.max_drift.count() != 0) {
      throw std::invalid_argument(
          "AssignTimestampsAndWatermarks: max_drift aligns the partitions of a Kafka source and is only taken "
          "there (kafka::SourceOptions::watermarks); remove it from this strategy");
    }
    DataStream<T> timed = Then<T>("Timestamps/Watermarks", type(), [strategy] {
      return std::make_unique<internal::TimestampsAndWatermarksOperator<T>>(strategy);
    });
    env_->vertex(timed.vertex_id()).properties[std::string(kEventTimeProperty)] = "source";
    return timed;
  }

  // Spreads records round-robin over the next vertex's subtasks.
  DataStream Rebalance() const { return DataStream(env_, vertex_, Partitioning::kRebalance, {}, side_); }
  // Sends every record to every subtask of the next vertex.
  DataStream Broadcast() const { return DataStream(env_, vertex_, Partitioning::kBroadcast, {}, side_); }

  // A user-defined sink: fn(const T&) (or fn(const T&, RuntimeContext&)) for
  // every record.
  template <typename F>
  SinkHandle Sink(std::string name, F fn) const {
    VertexSpec spec;
    spec.name = std::move(name);
    spec.kind = VertexSpec::Kind::kSink;
    spec.operator_factory = [fn] { return std::make_unique<internal::SinkFunctionOperator<T, F>>(fn); };
    return SinkHandle(env_, Attach(std::move(spec)));
  }

  // A sink that writes when checkpoints complete: `factory` makes one
  // TwoPhaseCommitSink<T, ...> (weir/two_phase_commit.h: exactly-once) or
  // WriteAheadSink<T, ...> (weir/write_ahead.h) per subtask. The job needs
  // checkpoints in EXACTLY_ONCE mode; the JobManager refuses it otherwise.
  template <typename Factory>
  SinkHandle SinkTo(std::string name, Factory factory) const {
    using Sink = typename std::invoke_result_t<Factory>::element_type;
    static_assert(std::is_same_v<typename Sink::Record, T>, "the sink's record type differs from the stream's");
    VertexSpec spec;
    spec.name = std::move(name);
    spec.kind = VertexSpec::Kind::kSink;
    // The JobManager's check of exactly-once sinks reads this.
    spec.properties["guarantee"] = "exactly-once";
    spec.operator_factory = [factory]() -> std::unique_ptr<StreamOperator> {
      if constexpr (std::is_base_of_v<internal::WriteAheadSinkTag, Sink>) {
        return std::make_unique<internal::WriteAheadOperator<Sink>>(factory());
      } else {
        return std::make_unique<internal::TwoPhaseCommitOperator<Sink>>(factory());
      }
    };
    return SinkHandle(env_, Attach(std::move(spec)));
  }

  // Low-level: adds `spec` downstream of this stream; returns its id.
  int Attach(VertexSpec spec) const {
    int id = env_->AddVertex(std::move(spec));
    env_->AddEdge(vertex_, id, next_, key_, side_.id, side_.type);
    return id;
  }

  StreamEnvironment* env() const { return env_; }
  int vertex_id() const { return vertex_; }
  // The type operations of this stream's records.
  const TypeOps* type() const { return side_.type != nullptr ? side_.type : env_->vertex(vertex_).output_type; }

 private:
  template <typename Out, typename Factory>
  DataStream<Out> Then(const char* default_name, const TypeOps* type, Factory factory) const {
    VertexSpec spec;
    spec.name = default_name;
    spec.operator_factory = std::move(factory);
    spec.output_type = type;
    return DataStream<Out>(env_, Attach(std::move(spec)));
  }

  StreamEnvironment* env_;
  int vertex_;
  Partitioning next_;
  KeyFunction key_;
  StreamSide side_;
};

template <typename T, typename K, typename KS, typename Assigner>
class WindowedStream;

template <typename T, typename K, typename KS>
class KeyedStream {
 public:
  // Event-time windows (weir/window.h): TumblingWindows, SlidingWindows,
  // SessionWindows.
  template <typename Assigner>
  WindowedStream<T, K, KS, Assigner> Window(Assigner assigner) const;

  template <typename KeyFn>
  KeyedStream(StreamEnvironment* env, int vertex, KeyFn key_fn, StreamSide side = {})
      : env_(env), vertex_(vertex), key_fn_(std::move(key_fn)), side_(side) {}

  // fn(const T&, KeyedContext<K>&, Collector<Out>&), with state per key.
  template <typename Out, typename S = Serializer<Out>, typename F>
  DataStream<Out> Process(F fn) const {
    return Process<Out, S>(std::move(fn), nullptr);
  }

  // As Process(fn), with timers: fn and on_timer may register them through
  // their KeyedContext, and on_timer(const TimerInfo&, KeyedContext<K>&,
  // Collector<Out>&) is called when one fires, with the timer's key (what it
  // emits carries the timer's time as its event time, for event-time
  // timers). Timers are part of the keyed state: checkpointed, restored and
  // rescaled with it.
  template <typename Out, typename S = Serializer<Out>, typename F, typename TimerFn>
  DataStream<Out> Process(F fn, TimerFn on_timer) const {
    auto key_fn = key_fn_;
    KeyFunction key = [key_fn](const void* record, std::string& out) {
      KS::Write(key_fn(*static_cast<const T*>(record)), out);
    };
    VertexSpec spec;
    spec.name = "KeyedProcess";
    spec.output_type = TypeOpsOf<Out, S>();
    spec.input_key = key;
    spec.operator_factory = [key_fn, fn, on_timer] {
      return std::make_unique<internal::KeyedProcessOperator<T, K, KS, Out, decltype(key_fn), F, TimerFn>>(
          key_fn, fn, on_timer);
    };
    DataStream<T> upstream(env_, vertex_, Partitioning::kHash, key, side_);
    return DataStream<Out>(env_, upstream.Attach(std::move(spec)));
  }

 private:
  template <typename, typename, typename, typename>
  friend class WindowedStream;

  StreamEnvironment* env_;
  int vertex_;
  std::function<K(const T&)> key_fn_;
  StreamSide side_;
};

template <typename T, typename S>
DataStream<T> StreamEnvironment::AddSource(std::string name,
                                           std::function<std::unique_ptr<SourceFunction<T>>()> factory) {
  VertexSpec spec;
  spec.name = std::move(name);
  spec.kind = VertexSpec::Kind::kSource;
  spec.output_type = TypeOpsOf<T, S>();
  spec.source_factory = [factory] {
    return std::make_unique<internal::SourceFunctionOperator<T>>(factory());
  };
  return DataStream<T>(this, AddVertex(std::move(spec)));
}

}  // namespace weir

// Windows build on the classes above.
#include "weir/window.h"  // IWYU pragma: export
