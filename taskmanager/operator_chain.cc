#include "taskmanager/operator_chain.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/state/key_groups.h"
#include "common/status_macros.h"
#include "connectors/connector.h"
#include "jobgraph/graph_spec.h"
#include "taskmanager/eventtime/timer_service.h"
#include "taskmanager/state/in_memory_keyed_state.h"
#include "taskmanager/state/rocksdb_keyed_state.h"

namespace weir::taskmanager {
namespace {

Partitioning FromProto(v1::Partitioning p) {
  switch (p) {
    case v1::FORWARD: return Partitioning::kForward;
    case v1::REBALANCE: return Partitioning::kRebalance;
    case v1::HASH: return Partitioning::kHash;
    case v1::BROADCAST: return Partitioning::kBroadcast;
    default: return Partitioning::kRebalance;
  }
}

}  // namespace

// What one operator of the chain sees of the runtime, and its state.
class OperatorChain::Context final : public OperatorContext {
 public:
  Context(std::string name, int subtask, int parallelism, const google::protobuf::Map<std::string, std::string>* config,
          OperatorStateSnapshot restored_operator_state, bool restored, std::unique_ptr<MetricGroup> metrics,
          int64_t* element_time, const bool* checkpoint_follows_end)
      : element_time_(element_time),
        checkpoint_follows_end_(checkpoint_follows_end),
        metrics_(std::move(metrics)),
        name_(std::move(name)),
        subtask_(subtask),
        parallelism_(parallelism),
        config_(config),
        operator_state_(std::move(restored_operator_state)),
        restored_(restored) {}

  const std::string& operator_name() const override { return name_; }
  int subtask_index() const override { return subtask_; }
  int parallelism() const override { return parallelism_; }
  KeyedStateStore* keyed_state() override { return keyed_.get(); }
  void SetCurrentKey(std::string_view key) override {
    if (keyed_ != nullptr) keyed_->SetCurrentKey(key);
  }
  std::string JobConfig(std::string_view key, std::string_view fallback) const override {
    auto it = config_->find(std::string(key));
    return it == config_->end() ? std::string(fallback) : it->second;
  }
  OperatorStateStore* operator_state() override { return &operator_state_; }
  bool is_restored() const override { return restored_; }
  MetricGroup& metrics() override { return *metrics_; }
  int64_t current_timestamp() const override { return *element_time_; }
  TimerService* timers() override { return timers_.get(); }
  RecordOutput* side_output(int id) override {
    auto it = side_outputs_.find(id);
    return it == side_outputs_.end() ? nullptr : it->second;
  }
  void SetSideOutput(int id, RecordOutput* output) { side_outputs_[id] = output; }
  bool checkpoint_follows_end_of_input() const override { return *checkpoint_follows_end_; }
  void LogWarning(std::string_view message) override {
    static const std::shared_ptr<spdlog::logger> log = logging::Get("task");
    log->warn("task {}: {}", task_id_, message);
  }
  void SetTaskId(std::string task_id) { task_id_ = std::move(task_id); }

  // Keyed state, restored already, and the timers it holds.
  void EnableKeyedState(std::unique_ptr<KeyedStateBackend> keyed, int max_parallelism) {
    keyed_ = std::move(keyed);
    timers_ = std::make_unique<InternalTimerService>(keyed_.get(), &operator_state_, max_parallelism, element_time_);
    timers_->Restore();
  }
  KeyedStateBackend* keyed() { return keyed_.get(); }
  InternalTimerService* timer_service() { return timers_.get(); }
  OperatorStateBackend& operator_state_backend() { return operator_state_; }

 private:
  int64_t* const element_time_;  // the chain's
  const bool* const checkpoint_follows_end_;  // the chain's
  const std::unique_ptr<MetricGroup> metrics_;
  const std::string name_;
  const int subtask_;
  const int parallelism_;
  const google::protobuf::Map<std::string, std::string>* const config_;
  OperatorStateBackend operator_state_;
  const bool restored_;
  std::unique_ptr<KeyedStateBackend> keyed_;
  std::unique_ptr<InternalTimerService> timers_;  // with keyed_
  std::map<int, RecordOutput*> side_outputs_;     // the chain's tail only
  std::string task_id_;                           // for LogWarning
};

// Passes records to the next operator of the chain.
namespace {

// Whether the graph has sinks and every one of them writes at-most-once.
bool AllSinksAtMostOnce(const JobGraph& graph) {
  int sinks = 0;
  for (const VertexSpec& v : graph.vertices) {
    if (v.kind != VertexSpec::Kind::kSink) continue;
    ++sinks;
    if (!connectors::WritesAtMostOnce(v.properties)) return false;
  }
  return sinks > 0;
}

// Whether a vertex with a watermark strategy (property weir.event-time =
// source) is `vertex` or upstream of it: then records carry their event time
// on the way out of `vertex`.
bool FedByEventTime(const JobGraph& graph, int vertex) {
  auto is_source = [&](int v) {
    const VertexSpec& spec = graph.vertices.at(static_cast<size_t>(v));
    auto it = spec.properties.find(std::string(kEventTimeProperty));
    return it != spec.properties.end() && it->second == "source";
  };
  if (is_source(vertex)) return true;
  std::vector<std::vector<int>> upstream(graph.vertices.size());
  for (const EdgeSpec& e : graph.edges) {
    graph.vertices.at(static_cast<size_t>(e.source));  // throws on an edge outside the graph
    upstream.at(static_cast<size_t>(e.target)).push_back(e.source);
  }
  return jobgraph::AnyUpstream(upstream, vertex, is_source);
}

// The registry of `options`, or an empty one (every connector is unknown).
const connectors::ConnectorRegistry& ConnectorsOf(const OperatorChainOptions& options) {
  static const connectors::ConnectorRegistry* const kNone = new connectors::ConnectorRegistry();
  return options.connectors != nullptr ? *options.connectors : *kNone;
}

}  // namespace

// What an operator emits into: the next operator of the chain (`next`, whose
// own output is `next_output`), or another output (`then`: the writers, or an
// output that counts). Counts the records that pass on `counter` (and
// `second`). The event time of the record in flight lives in the chain's
// slot `element_time`: EmitAt sets it for the call, Emit keeps it, and what
// leaves the chain takes it along. Watermarks go through each operator's
// OnWatermark; statuses pass by the operators.
class OperatorChain::Output final : public RecordOutput {
 public:
  Output(int64_t* element_time, std::atomic<int64_t>* watermark, StreamOperator* next, RecordOutput* next_output,
         RecordOutput* then, std::atomic<int64_t>* counter, std::atomic<int64_t>* second = nullptr)
      : element_time_(element_time),
        watermark_(watermark),
        next_(next),
        next_output_(next_output),
        then_(then),
        then_shares_slot_(dynamic_cast<Output*>(then) != nullptr),  // every Output of a chain has its slot
        counter_(counter),
        second_(second) {}

  void Emit(void* record) override {
    if (counter_ != nullptr) counter_->fetch_add(1, std::memory_order_relaxed);
    if (second_ != nullptr) second_->fetch_add(1, std::memory_order_relaxed);
    if (next_ != nullptr) {
      next_->Process(record);
    } else if (then_shares_slot_) {
      then_->Emit(record);  // another Output of the chain: the time is in the slot
    } else if (then_ != nullptr) {
      then_->EmitAt(record, *element_time_);
    }
  }
  void EmitAt(void* record, int64_t timestamp) override {
    // Put back also when the call throws (TaskCancelled, a user error).
    const absl::Cleanup restore = [slot = element_time_, saved = *element_time_] { *slot = saved; };
    *element_time_ = timestamp;
    Emit(record);
  }
  // The timers of the next operator (keyed operators): its event-time
  // timers fire as the watermark reaches it, before its OnWatermark.
  void set_next_timers(InternalTimerService* timers) { next_timers_ = timers; }

  void EmitWatermark(int64_t watermark) override {
    // Only the task thread writes it; metrics read it.
    if (watermark_ != nullptr && watermark > watermark_->load(std::memory_order_relaxed)) {
      watermark_->store(watermark, std::memory_order_relaxed);
    }
    if (next_ != nullptr) {
      if (next_timers_ != nullptr) {
        next_timers_->AdvanceWatermark(watermark, [this](const FiredTimer& timer) { next_->OnTimer(timer); });
      }
      const int64_t passed = next_->OnWatermark(watermark);
      if (passed != kMinWatermark && next_output_ != nullptr) next_output_->EmitWatermark(passed);
    } else if (then_ != nullptr) {
      then_->EmitWatermark(watermark);
    }
  }
  void EmitWatermarkStatus(bool idle) override {
    RecordOutput* onward = next_ != nullptr ? next_output_ : then_;
    if (onward != nullptr) onward->EmitWatermarkStatus(idle);
  }

 private:
  int64_t* const element_time_;
  std::atomic<int64_t>* const watermark_;
  StreamOperator* const next_;
  RecordOutput* const next_output_;
  RecordOutput* const then_;
  const bool then_shares_slot_;
  std::atomic<int64_t>* const counter_;
  std::atomic<int64_t>* const second_;
  InternalTimerService* next_timers_ = nullptr;
};

// Sends each record to several outputs (a vertex with several downstreams),
// and watermarks and statuses also to `events_only` (side outputs, which
// carry only their own records).
class OperatorChain::FanOutOutput final : public RecordOutput {
 public:
  explicit FanOutOutput(std::vector<RecordOutput*> outputs, std::vector<RecordOutput*> events_only = {})
      : outputs_(std::move(outputs)), events_only_(std::move(events_only)) {}
  void Emit(void* record) override {
    // Only RecordWriters sit here; they serialize and never move from the record.
    for (RecordOutput* out : outputs_) out->Emit(record);
  }
  void EmitAt(void* record, int64_t timestamp) override {
    for (RecordOutput* out : outputs_) out->EmitAt(record, timestamp);
  }
  void EmitWatermark(int64_t watermark) override {
    for (RecordOutput* out : outputs_) out->EmitWatermark(watermark);
    for (RecordOutput* out : events_only_) out->EmitWatermark(watermark);
  }
  void EmitWatermarkStatus(bool idle) override {
    for (RecordOutput* out : outputs_) out->EmitWatermarkStatus(idle);
    for (RecordOutput* out : events_only_) out->EmitWatermarkStatus(idle);
  }

 private:
  const std::vector<RecordOutput*> outputs_;
  const std::vector<RecordOutput*> events_only_;
};

class OperatorChain::Discard final : public RecordOutput {
 public:
  void Emit(void*) override {}
};

OperatorChain::OperatorChain(const v1::TaskDeploymentDescriptor& tdd, const jobgraph::LoadedJob& job,
                             OperatorChainOptions options, ChainCounters counters)
    : tdd_(tdd),
      job_(job),
      options_(std::move(options)),
      counters_(counters),
      own_metrics_(options_.metrics == nullptr ? std::make_unique<TaskMetrics>() : nullptr),
      metrics_(options_.metrics != nullptr ? options_.metrics : own_metrics_.get()),
      discard_(std::make_unique<Discard>()) {}

absl::StatusOr<std::unique_ptr<OperatorChain>> OperatorChain::Create(const v1::TaskDeploymentDescriptor& tdd,
                                                                    const jobgraph::LoadedJob& job,
                                                                    OperatorChainOptions options, ChainCounters counters,
                                                                    const ChainSnapshot* restored) {
  std::unique_ptr<OperatorChain> chain(new OperatorChain(tdd, job, std::move(options), counters));
  RETURN_IF_ERROR(chain->Build(restored));
  return chain;
}

OperatorChain::~OperatorChain() {
  CloseAll();
  writers_.clear();
  for (const auto& partition : partitions_) {
    // Releasing wakes a producer or consumer still waiting on it.
    if (!consumed_) partition->Release();
    options_.partitions->Unregister(partition->id());
  }
}

const TypeOps* OperatorChain::input_type() const {
  // The edge's type: a side output's records are not the vertex's.
  for (const EdgeSpec& e : job_.graph.edges) {
    if (e.source == tdd_.input_vertex() && tdd_.vertex_ids_size() > 0 && e.target == tdd_.vertex_ids(0) &&
        e.type != nullptr) {
      return e.type;
    }
  }
  return job_.graph.vertices.at(tdd_.input_vertex()).output_type;
}

absl::StatusOr<std::unique_ptr<KeyedStateBackend>> OperatorChain::CreateKeyedState(const VertexSpec& vertex,
                                                                                   state::KeyGroupRange range,
                                                                                   int max_parallelism) {
  const std::string& backend = tdd_.state_backend().empty() ? options_.state_backend : tdd_.state_backend();
  if (backend == "hashmap") return std::make_unique<InMemoryKeyedState>(range, max_parallelism);
  if (backend != "rocksdb") {
    return absl::InvalidArgumentError(absl::StrCat("unknown state backend '", backend,
                                                   "' (state.backend.type: rocksdb or hashmap)"));
  }
  RocksDbStateOptions rocks;
  // The task id names job, attempt, chain and subtask; '/' would nest.
  std::string task = tdd_.task_id();
  for (char& c : task) {
    if (c == '/') c = '_';
  }
  rocks.instance_dir = absl::StrCat(options_.local_state_dir, "/", tdd_.job_id(), "/", task, "-v", vertex.id);
  rocks.incremental = tdd_.incremental_checkpoints();
  rocks.write_ahead_log = !tdd_.checkpoint_dir().empty();  // no snapshots without it
  rocks.write_buffer_bytes = options_.rocksdb_write_buffer_bytes;
  if (tdd_.local_recovery()) {
    // Named by what it holds, not by attempt: the next attempt's subtask
    // with this key-group range finds it.
    rocks.local_recovery_dir = absl::StrCat(options_.local_state_dir, "/", kLocalRecoveryDirName, "/", tdd_.job_id(),
                                            "/v", vertex.id, "-kg", range.start, "-", range.end);
  }
  auto opened = RocksDbKeyedState::Open(range, max_parallelism, std::move(rocks));
  if (!opened.ok()) return opened.status();
  return std::unique_ptr<KeyedStateBackend>(std::move(*opened));
}

absl::Status OperatorChain::Build(const ChainSnapshot* restored) {
  const int n = tdd_.vertex_ids_size();
  if (n == 0) return absl::InvalidArgumentError("the task has no vertices");
  if (restored != nullptr && static_cast<int>(restored->operators.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("the restored state has ", restored->operators.size(),
                                                   " operators but the chain has ", n));
  }
  input_ended_ = restored != nullptr && restored->input_ended;
  const int max_parallelism = tdd_.max_parallelism() > 0 ? tdd_.max_parallelism() : options_.max_parallelism;
  auto vertex = [&](int i) -> const VertexSpec& { return job_.graph.vertices.at(tdd_.vertex_ids(i)); };

  for (int i = 0; i < n; ++i) {
    const VertexSpec& v = vertex(i);
    // An operator new to the job (no state in the checkpoint) starts fresh
    // and is told so (is_restored false).
    const bool has_state = restored != nullptr && restored->operators[i].present;
    OperatorStateSnapshot restored_operator_state;
    if (has_state) restored_operator_state = restored->operators[i].operator_state;
    auto context = std::make_unique<Context>(v.name, tdd_.subtask_index(), tdd_.parallelism(), &tdd_.config(),
                                             std::move(restored_operator_state), has_state,
                                             metrics_->ForOperator(v.name), &element_time_,
                                             &checkpoint_follows_end_);
    context->SetTaskId(tdd_.task_id());
    if (v.input_key) {
      const state::KeyGroupRange range =
          state::KeyGroupRangeForSubtask(max_parallelism, tdd_.parallelism(), tdd_.subtask_index());
      ASSIGN_OR_RETURN(std::unique_ptr<KeyedStateBackend> keyed, CreateKeyedState(v, range, max_parallelism));
      if (has_state) {
        RETURN_IF_ERROR(Annotate(keyed->Restore(restored->operators[i].keyed_restore),
                                 absl::StrCat("restoring the keyed state of operator '", v.name, "'")));
      }
      context->EnableKeyedState(std::move(keyed), max_parallelism);
      if (!FedByEventTime(job_.graph, v.id)) {
        context->timer_service()->WarnOnEventTimeTimers(
            absl::StrCat("task ", tdd_.task_id(), ": operator '", v.name, "'"));
      }
    }
    contexts_.push_back(std::move(context));

    std::map<std::string, std::string> props(v.properties.begin(), v.properties.end());
    if (i == 0 && v.kind == VertexSpec::Kind::kSource) {
      if (!v.connector.empty()) {
        // A job whose sinks are all at-most-once must not replay after a
        // failure: its sources resume from the newest position reached.
        connectors::SourceContext source_context;
        source_context.job_at_most_once = AllSinksAtMostOnce(job_.graph);
        source_context.timestamp_extractor = v.timestamp_extractor;
        source_context.event_time_stall_warning_ms = absl::ToInt64Milliseconds(options_.event_time_stall_warning);
        source_context.job_id = tdd_.job_id();
        source_context.operator_id = v.uid.empty() ? absl::StrCat("vertex-", v.id) : v.uid;
        ASSIGN_OR_RETURN(source_, ConnectorsOf(options_).CreateSource(v.connector, props, source_context));
      } else {
        source_ = v.source_factory();
      }
      operators_.push_back(nullptr);
    } else if (!v.connector.empty()) {
      ASSIGN_OR_RETURN(auto sink, ConnectorsOf(options_).CreateSink(v.connector, props));
      operators_.push_back(std::move(sink));
    } else {
      operators_.push_back(v.operator_factory());
    }
  }

  // The tail's output: the writers of its outgoing edges (none for a sink).
  const VertexSpec& tail = vertex(n - 1);
  // Records carry event time on the wire only below a watermark strategy.
  const bool event_time = FedByEventTime(job_.graph, tail.id);
  std::vector<RecordOutput*> tail_outputs;                 // the main output's writers
  std::map<int, std::vector<RecordOutput*>> side_writers;  // by side output id
  for (const v1::OutputSpec& out : tdd_.outputs()) {
    auto partition = std::make_shared<network::ResultPartition>(out.partition_id(), out.num_subpartitions(),
                                                                options_.max_buffers_per_channel);
    RETURN_IF_ERROR(options_.partitions->Register(partition));
    partitions_.push_back(partition);
    if (options_.on_partition) options_.on_partition(partition);
    network::RecordWriterOptions writer_options;
    writer_options.max_buffer_bytes = options_.segment_size;
    writer_options.flush_interval = options_.buffer_timeout;
    writer_options.max_parallelism = max_parallelism;
    if (out.num_subpartitions() > max_parallelism) {
      return absl::InvalidArgumentError(absl::StrCat("the consumer parallelism ", out.num_subpartitions(),
                                                     " exceeds the job's max parallelism ", max_parallelism));
    }
    writer_options.producer_parallelism = tdd_.parallelism();
    writer_options.timestamps = event_time;
    const EdgeSpec* edge = nullptr;
    for (const EdgeSpec& e : job_.graph.edges) {
      if (e.source == tail.id && e.target == out.target_vertex()) edge = &e;
    }
    if (edge == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the job graph has no edge from vertex ", tail.id, " to vertex ",
                                                     out.target_vertex()));
    }
    // A side output's records are of the edge's type.
    const TypeOps* type = edge->type != nullptr ? edge->type : tail.output_type;
    writers_.push_back(std::make_unique<network::RecordWriter>(partition, type, FromProto(out.partitioning()),
                                                               edge->key, out.num_subpartitions(),
                                                               tdd_.subtask_index(), writer_options));
    if (edge->side_output == 0) {
      tail_outputs.push_back(writers_.back().get());
    } else {
      side_writers[edge->side_output].push_back(writers_.back().get());
    }
  }
  // Side writers get the watermarks and statuses of the main output too.
  std::vector<RecordOutput*> events_only;
  for (const auto& [id, writers] : side_writers) events_only.insert(events_only.end(), writers.begin(), writers.end());
  RecordOutput* tail_output = nullptr;
  if (tail_outputs.size() == 1 && events_only.empty()) {
    tail_output = tail_outputs[0];
  } else if (!tail_outputs.empty() || !events_only.empty()) {
    outputs_owned_.push_back(std::make_unique<FanOutOutput>(tail_outputs, events_only));
    tail_output = outputs_owned_.back().get();
  }

  // Each operator's output. Counted as leaving the chain: what enters the
  // writers, or the sink at the tail.
  const bool tail_is_sink = tail.kind == VertexSpec::Kind::kSink;
  auto add = [this](std::unique_ptr<RecordOutput> output) {
    outputs_owned_.push_back(std::move(output));
    return outputs_owned_.back().get();
  };
  std::vector<RecordOutput*> outputs(n, discard_.get());
  int64_t* const slot = &element_time_;
  // From the tail back, so that each output knows the next operator's.
  for (int i = n - 1; i >= 0; --i) {
    if (i + 1 < n) {
      auto into_next = std::make_unique<Output>(slot, counters_.watermark, operators_[i + 1].get(), outputs[i + 1],
                                                nullptr, nullptr);
      into_next->set_next_timers(contexts_[i + 1]->timer_service());
      RecordOutput* next = add(std::move(into_next));
      if (i + 2 == n && tail_is_sink) {
        next = add(std::make_unique<Output>(slot, counters_.watermark, nullptr, nullptr, next, counters_.records_out));
      }
      outputs[i] = next;
    } else if (tail_output != nullptr) {
      outputs[i] = add(std::make_unique<Output>(slot, counters_.watermark, nullptr, nullptr, tail_output, counters_.records_out));
    }
  }
  if (source_ != nullptr) {
    // What the source produces enters the chain.
    outputs[0] = add(std::make_unique<Output>(slot, counters_.watermark, nullptr, nullptr, outputs[0], counters_.records_in));
  } else {
    // A lone sink: what it takes in is what it writes out.
    const bool sink_only = n == 1 && tail_is_sink;
    auto head = std::make_unique<Output>(slot, counters_.watermark, operators_[0].get(), outputs[0], nullptr,
                                         counters_.records_in, sink_only ? counters_.records_out : nullptr);
    head->set_next_timers(contexts_[0]->timer_service());
    head_input_ = std::move(head);
  }
  // The tail operator's side outputs, counted as leaving the chain.
  for (const auto& [id, writers] : side_writers) {
    RecordOutput* side = writers.size() == 1 ? writers[0] : add(std::make_unique<FanOutOutput>(writers));
    contexts_[n - 1]->SetSideOutput(
        id, add(std::make_unique<Output>(slot, nullptr, nullptr, nullptr, side, counters_.records_out)));
  }
  outputs_ = std::move(outputs);
  opened_.assign(n, false);
  return absl::OkStatus();
}

std::vector<CheckpointListener*> OperatorChain::Listeners() {
  std::vector<CheckpointListener*> out;
  for (size_t i = 0; i < operators_.size(); ++i) {
    out.push_back(i == 0 && source_ != nullptr ? static_cast<CheckpointListener*>(source_.get())
                                               : operators_[i].get());
  }
  return out;
}

void OperatorChain::InitializeStateAndOpen() {
  std::vector<CheckpointListener*> listeners = Listeners();
  for (size_t i = 0; i < listeners.size(); ++i) listeners[i]->InitializeState(*contexts_[i]);
  for (int i = static_cast<int>(operators_.size()) - 1; i >= 0; --i) {
    if (i == 0 && source_ != nullptr) {
      source_->Open(*contexts_[0], outputs_[0]);
    } else {
      operators_[i]->Open(*contexts_[i], outputs_[i]);
    }
    opened_[i] = true;
  }
}

void OperatorChain::ProcessWatermark(int64_t watermark) {
  if (head_input_ != nullptr) head_input_->EmitWatermark(watermark);
}

void OperatorChain::PeriodicEmit() {
  if (source_ != nullptr) source_->OnPeriodicEmit();
  for (auto& op : operators_) {
    if (op != nullptr) op->OnPeriodicEmit();
  }
}

void OperatorChain::FireProcessingTimers(int64_t now_ms) {
  for (size_t i = 0; i < contexts_.size(); ++i) {
    InternalTimerService* timers = contexts_[i]->timer_service();
    if (timers == nullptr || operators_[i] == nullptr) continue;
    StreamOperator* op = operators_[i].get();
    timers->FireProcessingTimers(now_ms, [op](const FiredTimer& timer) { op->OnTimer(timer); });
  }
}

std::optional<int64_t> OperatorChain::NextProcessingTimer() const {
  std::optional<int64_t> next;
  for (const auto& context : contexts_) {
    const InternalTimerService* timers = context->timer_service();
    if (timers == nullptr) continue;
    const std::optional<int64_t> due = timers->NextProcessingTime();
    if (due.has_value() && (!next.has_value() || *due < *next)) next = due;
  }
  return next;
}

void OperatorChain::EndSourceEventTime() {
  if (source_ == nullptr || source_event_time_ended_ || outputs_.empty()) return;
  // Every bounded source ends event time, with or without a strategy of its
  // own: a watermark strategy further down (in this chain or another task)
  // passes it on, so that event-time windows fire before the final
  // checkpoint. Operators that do not use event time pass it through.
  source_event_time_ended_ = true;
  outputs_[0]->EmitWatermark(kMaxWatermark);
}

void OperatorChain::ProcessWatermarkStatus(bool idle) {
  if (head_input_ != nullptr) head_input_->EmitWatermarkStatus(idle);
}

void OperatorChain::FlushDue(absl::Time now) {
  for (auto& writer : writers_) writer->FlushIfDue(now);
}

void OperatorChain::Idle(absl::Time now) {
  for (size_t i = source_ != nullptr ? 1 : 0; i < operators_.size(); ++i) operators_[i]->OnIdle();
  FlushDue(now);
}

void OperatorChain::PrepareSnapshotPreBarrier(int64_t checkpoint_id) {
  for (CheckpointListener* listener : Listeners()) listener->PrepareSnapshotPreBarrier(checkpoint_id);
}

void OperatorChain::BroadcastBarrier(int64_t checkpoint_id, int64_t timestamp_ms) {
  for (auto& writer : writers_) writer->BroadcastBarrier(checkpoint_id, timestamp_ms);
}

absl::StatusOr<ChainSnapshot> OperatorChain::SnapshotState(const CheckpointInfo& checkpoint) {
  ChainSnapshot snapshot;
  snapshot.checkpoint_id = checkpoint.checkpoint_id;
  snapshot.input_ended = input_ended_;
  std::vector<CheckpointListener*> listeners = Listeners();
  for (size_t i = 0; i < listeners.size(); ++i) {
    const absl::Time start = absl::Now();
    listeners[i]->SnapshotState(checkpoint);
    if (InternalTimerService* timers = contexts_[i]->timer_service()) timers->SnapshotState();
    OperatorSnapshot& op = snapshot.operators.emplace_back();
    op.operator_state = contexts_[i]->operator_state_backend().Snapshot();
    const absl::Time operator_done = absl::Now();
    snapshot.operators_time += operator_done - start;
    if (KeyedStateBackend* keyed = contexts_[i]->keyed()) {
      absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> part = keyed->Snapshot(checkpoint.checkpoint_id);
      snapshot.keyed_time += absl::Now() - operator_done;
      if (!part.ok()) {
        return Annotate(part.status(),
                        absl::StrCat("snapshotting the keyed state of operator '", contexts_[i]->operator_name(), "'"));
      }
      op.keyed = std::move(*part);
    }
  }
  return snapshot;
}

size_t OperatorChain::AfterSnapshot() {
  size_t written = 0;
  for (auto& context : contexts_) {
    if (InternalTimerService* timers = context->timer_service()) written += timers->AfterSnapshot();
  }
  return written;
}

void OperatorChain::NotifyCheckpointComplete(int64_t checkpoint_id) {
  for (CheckpointListener* listener : Listeners()) listener->NotifyCheckpointComplete(checkpoint_id);
  for (auto& context : contexts_) {
    if (KeyedStateBackend* keyed = context->keyed()) keyed->NotifyCheckpointComplete(checkpoint_id);
  }
}

void OperatorChain::NotifyCheckpointAborted(int64_t checkpoint_id) {
  for (CheckpointListener* listener : Listeners()) listener->NotifyCheckpointAborted(checkpoint_id);
  for (auto& context : contexts_) {
    if (KeyedStateBackend* keyed = context->keyed()) keyed->NotifyCheckpointAborted(checkpoint_id);
  }
}

void OperatorChain::EndInput(bool checkpoint_follows) {
  checkpoint_follows_end_ = checkpoint_follows;
  if (!input_ended_) {
    input_ended_ = true;
    for (auto& op : operators_) {
      if (op != nullptr) op->EndInput();  // null: the source's place
    }
  }
  for (auto& writer : writers_) writer->EmitEndOfData(checkpoint_follows);
}

void OperatorChain::EndPartitions() {
  for (auto& writer : writers_) writer->EmitEndOfInput();
}

bool OperatorChain::AllConsumed() {
  for (const auto& partition : partitions_) {
    for (int i = 0; i < partition->num_subpartitions(); ++i) {
      if (partition->buffered(i) > 0) return false;
    }
  }
  consumed_ = true;
  return true;
}

void OperatorChain::CloseAll() {
  // Close never throws out of here: a failing Close must not end the process.
  // Only what was opened is closed.
  static const std::shared_ptr<spdlog::logger> log = logging::Get("task");
  auto close_quietly = [&](auto close) {
    try {
      close();
    } catch (const std::exception& e) {
      log->warn("task {}: closing an operator failed: {}", tdd_.task_id(), e.what());
    } catch (...) {
      log->warn("task {}: closing an operator failed with a non-standard exception", tdd_.task_id());
    }
  };
  for (size_t i = 0; i < operators_.size(); ++i) {
    if (i >= opened_.size() || !opened_[i]) continue;
    if (i == 0 && source_ != nullptr) {
      close_quietly([&] { source_->Close(); });
    } else if (operators_[i] != nullptr) {
      close_quietly([&] { operators_[i]->Close(); });
    }
  }
  // Operators first: they hold code of the job library.
  head_input_.reset();
  outputs_owned_.clear();
  operators_.clear();
  source_.reset();
  contexts_.clear();
}

}  // namespace weir::taskmanager
