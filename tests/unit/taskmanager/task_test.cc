// Task-level behaviour in-process: a job built with the DataStream API, a
// fake loader instead of downloaded binaries, a fake listener instead of the
// JobManager.
#include "taskmanager/task.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/operator_chain.h"
#include "tests/testing/log_capture.h"
#include "weir/datastream.h"

namespace weir::taskmanager {
namespace {

using ::testing::ElementsAre;

// Hands out a job built in this process.
class FakeLoader final : public JobLoader {
 public:
  explicit FakeLoader(std::shared_ptr<jobgraph::LoadedJob> job) : job_(std::move(job)) {}
  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> Acquire(const std::string&, const std::string&,
                                                               const std::vector<std::string>&, const std::string&,
                                                               Cancellation*) override {
    ++acquired_;
    return job_;
  }
  void Release(const std::string&) override { ++released_; }
  std::atomic<int> acquired_{0}, released_{0};

 private:
  std::shared_ptr<jobgraph::LoadedJob> job_;
};

class FakeListener final : public TaskStateListener {
 public:
  void OnTaskState(const v1::TaskStateUpdate& update) override {
    absl::MutexLock lock(&mu_);
    states_.push_back(update.state());
    if (update.state() == v1::TASK_FAILED) error_ = update.error();
  }
  std::vector<v1::TaskState> states() {
    absl::MutexLock lock(&mu_);
    return states_;
  }
  std::string error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::TaskState> states_ ABSL_GUARDED_BY(mu_);
  std::string error_ ABSL_GUARDED_BY(mu_);
};

// What the source and sink saw; shared with the test.
struct Trace {
  absl::Mutex mu;
  std::vector<std::string> events ABSL_GUARDED_BY(mu);
  std::vector<int64_t> sunk ABSL_GUARDED_BY(mu);
  std::atomic<std::thread::id> task_thread{};
  std::atomic<int64_t> restored_from{-1};
  std::atomic<bool> in_poll{false};
  void Add(std::string event) {
    absl::MutexLock lock(&mu);
    events.push_back(std::move(event));
  }
};

// Counts from its position up to `limit` (then ends, or idles when
// `unbounded`), keeping the position in operator state.
class CountingSource final : public SourceFunction<int64_t> {
 public:
  CountingSource(Trace* trace, int64_t limit, bool unbounded) : trace_(trace), limit_(limit), unbounded_(unbounded) {}
  void InitializeState(OperatorContext& context) override {
    trace_->Add(context.is_restored() ? "initialize-restored" : "initialize");
    position_ = OperatorList<int64_t>(context.operator_state()->GetListState("position"));
    for (int64_t p : position_.Get()) {
      next_ = p;
      trace_->restored_from = p;
    }
  }
  void Open(OperatorContext&) override {
    trace_->Add("open");
    trace_->task_thread = std::this_thread::get_id();
  }
  SourceStatus Poll(Collector<int64_t>& out) override {
    trace_->in_poll = true;
    SourceStatus status = SourceStatus::kMoreAvailable;
    if (next_ < limit_) {
      out.Collect(next_++);
    } else {
      status = unbounded_ ? SourceStatus::kNothingAvailable : SourceStatus::kEndOfInput;
    }
    trace_->in_poll = false;
    return status;
  }
  void SnapshotState(const CheckpointInfo& checkpoint) override {
    position_.Update({next_});
    trace_->Add(absl::StrCat("snapshot ", checkpoint.checkpoint_id));
  }
  void NotifyCheckpointComplete(int64_t id) override { trace_->Add(absl::StrCat("complete ", id)); }
  void NotifyCheckpointAborted(int64_t id) override { trace_->Add(absl::StrCat("aborted ", id)); }
  void Close() override { trace_->Add("close"); }

 private:
  Trace* const trace_;
  const int64_t limit_;
  const bool unbounded_;
  OperatorList<int64_t> position_;
  int64_t next_ = 0;
};

std::shared_ptr<jobgraph::LoadedJob> CountingJob(Trace* trace, int64_t limit, bool unbounded) {
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  env.AddSource<int64_t>("numbers", [=] { return std::make_unique<CountingSource>(trace, limit, unbounded); })
      .Sink("collect", [trace](const int64_t& n) {
        absl::MutexLock lock(&trace->mu);
        trace->sunk.push_back(n);
      });
  return job;
}

v1::TaskDeploymentDescriptor Descriptor() {
  v1::TaskDeploymentDescriptor tdd;
  tdd.set_job_id("job-1");
  tdd.set_attempt(1);
  tdd.set_task_id("job-1/1/c0s0");
  tdd.add_vertex_ids(0);
  tdd.add_vertex_ids(1);
  tdd.set_subtask_index(0);
  tdd.set_parallelism(1);
  tdd.set_input_vertex(-1);
  tdd.set_max_parallelism(128);
  return tdd;
}

struct Harness {
  Trace trace;
  network::PartitionManager partitions;
  FakeListener listener;
  std::unique_ptr<FakeLoader> loader;

  std::unique_ptr<Task> MakeTask(int64_t limit, bool unbounded) {
    loader = std::make_unique<FakeLoader>(CountingJob(&trace, limit, unbounded));
    TaskEnvironment env;
    env.taskmanager_id = "tm-test";
    env.artifacts = loader.get();
    env.partitions = &partitions;
    env.listener = &listener;
    return std::make_unique<Task>(Descriptor(), env);
  }
};

void WaitDone(Task& task) {
  for (int i = 0; i < 30000 && !task.done(); ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(task.done());
}

// Event time across two tasks: a source with a watermark strategy emits
// records with their event time and watermarks; the map and the sink of the
// next task see each record's time, and the watermarks in order between
// the records, then the end of event time when the input ends.
class EventSource final : public SourceOperator {
 public:
  void Open(OperatorContext&, RecordOutput* output) override { output_ = output; }
  SourceStatus PollNext() override {
    switch (step_++) {
      case 0: Emit(10, 1000); break;
      case 1: Emit(11, 1005); break;
      case 2: output_->EmitWatermark(1003); break;
      case 3: Emit(12, 990); break;  // late, still passed on
      case 4: output_->EmitWatermark(1003); break;  // not above the last: dropped
      case 5: output_->EmitWatermark(1010); break;
      default: return SourceStatus::kEndOfInput;
    }
    return SourceStatus::kMoreAvailable;
  }

 private:
  void Emit(int64_t value, int64_t timestamp) { output_->EmitAt(&value, timestamp); }
  RecordOutput* output_ = nullptr;
  int step_ = 0;
};

// Adds 100, keeping the record's event time; notes what it saw.
class TimedMap final : public StreamOperator {
 public:
  explicit TimedMap(Trace* trace) : trace_(trace) {}
  void Open(OperatorContext& context, RecordOutput* output) override {
    context_ = &context;
    output_ = output;
  }
  void Process(void* record) override {
    int64_t value = *static_cast<int64_t*>(record);
    trace_->Add(absl::StrCat("map ", value, "@", context_->current_timestamp()));
    value += 100;
    output_->Emit(&value);
  }
  int64_t OnWatermark(int64_t watermark) override {
    trace_->Add(absl::StrCat("map watermark ", watermark));
    return watermark;
  }

 private:
  Trace* const trace_;
  OperatorContext* context_ = nullptr;
  RecordOutput* output_ = nullptr;
};

class TimedSink final : public StreamOperator {
 public:
  explicit TimedSink(Trace* trace) : trace_(trace) {}
  void Open(OperatorContext& context, RecordOutput*) override { context_ = &context; }
  void Process(void* record) override {
    trace_->Add(absl::StrCat("sink ", *static_cast<int64_t*>(record), "@", context_->current_timestamp()));
  }
  int64_t OnWatermark(int64_t watermark) override {
    trace_->Add(absl::StrCat("sink watermark ", watermark));
    return watermark;
  }

 private:
  Trace* const trace_;
  OperatorContext* context_ = nullptr;
};

std::shared_ptr<jobgraph::LoadedJob> EventTimeJob(Trace* trace) {
  auto job = std::make_shared<jobgraph::LoadedJob>();
  VertexSpec source;
  source.id = 0;
  source.name = "events";
  source.kind = VertexSpec::Kind::kSource;
  source.source_factory = [] { return std::make_unique<EventSource>(); };
  source.output_type = TypeOpsOf<int64_t>();
  source.properties[std::string(kEventTimeProperty)] = "source";
  VertexSpec map;
  map.id = 1;
  map.name = "map";
  map.operator_factory = [trace] { return std::make_unique<TimedMap>(trace); };
  map.output_type = TypeOpsOf<int64_t>();
  VertexSpec sink;
  sink.id = 2;
  sink.name = "sink";
  sink.kind = VertexSpec::Kind::kSink;
  sink.operator_factory = [trace] { return std::make_unique<TimedSink>(trace); };
  job->graph.vertices = {source, map, sink};
  job->graph.edges = {EdgeSpec{0, 1, Partitioning::kForward, nullptr}, EdgeSpec{1, 2, Partitioning::kForward, nullptr}};
  return job;
}

TEST(TaskTest, EventTimeCrossesTasksWithItsRecordsAndWatermarks) {
  Trace trace;
  network::PartitionManager partitions;
  FakeListener source_listener, sink_listener;
  FakeLoader loader(EventTimeJob(&trace));
  auto env = [&](FakeListener* listener) {
    TaskEnvironment e;
    e.taskmanager_id = "tm-test";
    e.artifacts = &loader;
    e.partitions = &partitions;
    e.listener = listener;
    return e;
  };
  v1::TaskDeploymentDescriptor producer = Descriptor();
  producer.set_task_id("job-1/1/c0s0");
  producer.clear_vertex_ids();
  producer.add_vertex_ids(0);
  v1::OutputSpec* out = producer.add_outputs();
  out->set_partition_id("p-events");
  out->set_target_vertex(1);
  out->set_partitioning(v1::FORWARD);
  out->set_num_subpartitions(1);
  v1::TaskDeploymentDescriptor consumer = Descriptor();
  consumer.set_task_id("job-1/1/c1s0");
  consumer.clear_vertex_ids();
  consumer.add_vertex_ids(1);
  consumer.add_vertex_ids(2);
  consumer.set_input_vertex(0);
  v1::InputChannelSpec* in = consumer.add_inputs();
  in->set_partition_id("p-events");
  in->set_subpartition(0);
  in->set_local(true);

  Task source_task(producer, env(&source_listener));
  Task sink_task(consumer, env(&sink_listener));
  source_task.Start();
  sink_task.Start();
  WaitDone(source_task);
  WaitDone(sink_task);
  EXPECT_EQ(source_listener.states().back(), v1::TASK_FINISHED) << source_listener.error();
  EXPECT_EQ(sink_listener.states().back(), v1::TASK_FINISHED) << sink_listener.error();
  absl::MutexLock lock(&trace.mu);
  const std::string end = absl::StrCat(kMaxWatermark);
  EXPECT_THAT(trace.events,
              ElementsAre("map 10@1000", "sink 110@1000", "map 11@1005", "sink 111@1005", "map watermark 1003",
                          "sink watermark 1003", "map 12@990", "sink 112@990", "map watermark 1010",
                          "sink watermark 1010", "map watermark " + end, "sink watermark " + end));
}

// A user source's records get their event time from a watermark strategy
// chained after it; its watermark follows at the periodic tick (the largest
// timestamp minus the bound, minus one), a late record still passes, and the
// end of the input ends event time.
struct TimedTrace : Trace {
  std::atomic<bool> watermark_seen{false};
};

class BurstSource final : public SourceFunction<int64_t> {
 public:
  explicit BurstSource(TimedTrace* trace) : trace_(trace) {}
  SourceStatus Poll(Collector<int64_t>& out) override {
    if (step_ == 0) {
      for (int64_t t : {1000, 1010, 1005}) out.Collect(t);
      ++step_;
      return SourceStatus::kMoreAvailable;
    }
    if (step_ == 1) {
      // Until the watermark of the first burst went through (a guard of 30 s).
      if (!trace_->watermark_seen && absl::Now() < deadline_) return SourceStatus::kNothingAvailable;
      out.Collect(1003);  // behind the watermark: late
      ++step_;
      return SourceStatus::kMoreAvailable;
    }
    return SourceStatus::kEndOfInput;
  }

 private:
  TimedTrace* const trace_;
  const absl::Time deadline_ = absl::Now() + absl::Seconds(30);
  int step_ = 0;
};

class WatermarkSink final : public StreamOperator {
 public:
  explicit WatermarkSink(TimedTrace* trace) : trace_(trace) {}
  void Open(OperatorContext& context, RecordOutput*) override { context_ = &context; }
  void Process(void* record) override {
    trace_->Add(absl::StrCat("sink ", *static_cast<int64_t*>(record), "@", context_->current_timestamp()));
  }
  int64_t OnWatermark(int64_t watermark) override {
    trace_->Add(absl::StrCat("sink watermark ", watermark));
    trace_->watermark_seen = true;
    return watermark;
  }

 private:
  TimedTrace* const trace_;
  OperatorContext* context_ = nullptr;
};

std::shared_ptr<jobgraph::LoadedJob> StrategyJob(TimedTrace* trace, WatermarkStrategy<int64_t> strategy) {
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  VertexSpec sink;
  sink.name = "sink";
  sink.kind = VertexSpec::Kind::kSink;
  sink.operator_factory = [trace] { return std::make_unique<WatermarkSink>(trace); };
  env.AddSource<int64_t>("burst", [trace] { return std::make_unique<BurstSource>(trace); })
      .AssignTimestampsAndWatermarks(std::move(strategy))
      .Attach(std::move(sink));
  return job;
}

// Runs the job to its end; returns the task's final metrics.
v1::TaskMetrics RunStrategyJob(TimedTrace* trace, WatermarkStrategy<int64_t> strategy, FakeListener* listener) {
  network::PartitionManager partitions;
  FakeLoader loader(StrategyJob(trace, std::move(strategy)));
  TaskEnvironment env;
  env.taskmanager_id = "tm-test";
  env.artifacts = &loader;
  env.partitions = &partitions;
  env.listener = listener;
  env.watermark_interval = absl::Milliseconds(1);
  v1::TaskDeploymentDescriptor tdd = Descriptor();
  tdd.add_vertex_ids(2);
  Task task(tdd, env);
  task.Start();
  WaitDone(task);
  return task.Metrics();
}

TEST(TaskTest, AWatermarkStrategyStampsRecordsAndEmitsItsWatermark) {
  TimedTrace trace;
  FakeListener listener;
  WatermarkStrategy<int64_t> strategy;
  strategy.out_of_orderness = std::chrono::milliseconds(5);
  strategy.timestamp = [](const int64_t& t) { return t; };
  const v1::TaskMetrics metrics = RunStrategyJob(&trace, strategy, &listener);
  EXPECT_EQ(listener.states().back(), v1::TASK_FINISHED) << listener.error();
  // The event time the task reached, for weir status and /metrics.
  ASSERT_TRUE(metrics.has_watermark_ms());
  EXPECT_EQ(metrics.watermark_ms(), kMaxWatermark);
  absl::MutexLock lock(&trace.mu);
  EXPECT_THAT(trace.events, ElementsAre("sink 1000@1000", "sink 1010@1010", "sink 1005@1005", "sink watermark 1004",
                                        "sink 1003@1003", "sink watermark " + absl::StrCat(kMaxWatermark)));
}

// A record without a usable event time fails the job by default, saying
// why; with kDrop it is dropped instead.
TEST(TaskTest, AnInvalidEventTimeFailsTheJobOrIsDropped) {
  WatermarkStrategy<int64_t> strategy;
  strategy.timestamp = [](const int64_t& t) { return t == 1010 ? int64_t{-7} : t; };
  {
    TimedTrace trace;
    FakeListener listener;
    RunStrategyJob(&trace, strategy, &listener);
    EXPECT_EQ(listener.states().back(), v1::TASK_FAILED);
    EXPECT_THAT(listener.error(), ::testing::HasSubstr("its timestamp -7 is before 1970"));
    EXPECT_THAT(listener.error(), ::testing::HasSubstr("kDrop"));
  }
  strategy.invalid_timestamps = InvalidTimestamps::kDrop;
  TimedTrace trace;
  FakeListener listener;
  const v1::TaskMetrics metrics = RunStrategyJob(&trace, strategy, &listener);
  EXPECT_EQ(listener.states().back(), v1::TASK_FINISHED) << listener.error();
  // The event time the task reached, for weir status and /metrics.
  ASSERT_TRUE(metrics.has_watermark_ms());
  EXPECT_EQ(metrics.watermark_ms(), kMaxWatermark);
  absl::MutexLock lock(&trace.mu);
  EXPECT_THAT(trace.events, ElementsAre("sink 1000@1000", "sink 1005@1005", "sink watermark 1004", "sink 1003@1003",
                                        "sink watermark " + absl::StrCat(kMaxWatermark)));
}

// A task whose event time waits on one input while the other moves on says
// which input, once: here source subtask 1 sends nothing at all.
class StallSource final : public SourceOperator {
 public:
  explicit StallSource(std::atomic<bool>* stop) : stop_(stop) {}
  void Open(OperatorContext& context, RecordOutput* output) override {
    output_ = output;
    subtask_ = context.subtask_index();
  }
  SourceStatus PollNext() override {
    if (stop_->load()) return SourceStatus::kEndOfInput;
    if (subtask_ == 1) return SourceStatus::kNothingAvailable;
    absl::SleepFor(absl::Milliseconds(1));
    output_->EmitWatermark(++watermark_);
    return SourceStatus::kMoreAvailable;
  }

 private:
  std::atomic<bool>* const stop_;
  RecordOutput* output_ = nullptr;
  int subtask_ = 0;
  int64_t watermark_ = 1000;
};

TEST(TaskTest, EventTimeHeldBackByOneInputIsLoggedNamingIt) {
  std::atomic<bool> stop{false};
  auto job = std::make_shared<jobgraph::LoadedJob>();
  VertexSpec source;
  source.id = 0;
  source.name = "events";
  source.kind = VertexSpec::Kind::kSource;
  source.source_factory = [&stop] { return std::make_unique<StallSource>(&stop); };
  source.output_type = TypeOpsOf<int64_t>();
  Trace trace;
  VertexSpec sink;
  sink.id = 1;
  sink.name = "sink";
  sink.kind = VertexSpec::Kind::kSink;
  sink.operator_factory = [&trace] { return std::make_unique<TimedSink>(&trace); };
  job->graph.vertices = {source, sink};
  job->graph.edges = {EdgeSpec{0, 1, Partitioning::kForward, nullptr}};

  // What the tasks log, to look for the warning.
  auto log_sink = std::make_shared<weir::testing::LogCapture>();
  logging::Get("task")->sinks().push_back(log_sink);
  auto log_text = [&] { return log_sink->text(); };

  network::PartitionManager partitions;
  FakeListener listener;
  FakeLoader loader(job);
  TaskEnvironment env;
  env.taskmanager_id = "tm-test";
  env.artifacts = &loader;
  env.partitions = &partitions;
  env.listener = &listener;
  env.event_time_stall_warning = absl::Milliseconds(200);
  std::vector<std::unique_ptr<Task>> tasks;
  v1::TaskDeploymentDescriptor consumer = Descriptor();
  consumer.set_task_id("job-1/1/c1s0");
  consumer.clear_vertex_ids();
  consumer.add_vertex_ids(1);
  consumer.set_input_vertex(0);
  for (int subtask = 0; subtask < 2; ++subtask) {
    v1::TaskDeploymentDescriptor producer = Descriptor();
    producer.set_task_id(absl::StrCat("job-1/1/c0s", subtask));
    producer.clear_vertex_ids();
    producer.add_vertex_ids(0);
    producer.set_subtask_index(subtask);
    producer.set_parallelism(2);
    v1::OutputSpec* out = producer.add_outputs();
    out->set_partition_id(absl::StrCat("p-s", subtask));
    out->set_target_vertex(1);
    out->set_partitioning(v1::FORWARD);
    out->set_num_subpartitions(1);
    tasks.push_back(std::make_unique<Task>(producer, env));
    v1::InputChannelSpec* in = consumer.add_inputs();
    in->set_partition_id(absl::StrCat("p-s", subtask));
    in->set_subpartition(0);
    in->set_local(true);
  }
  tasks.push_back(std::make_unique<Task>(consumer, env));
  for (auto& task : tasks) task->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);  // a guard
  while (!absl::StrContains(log_text(), "has waited") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  stop = true;
  for (auto& task : tasks) WaitDone(*task);
  auto& sinks = logging::Get("task")->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), log_sink), sinks.end());
  const std::string logged = log_text();
  EXPECT_TRUE(absl::StrContains(logged, "task job-1/1/c1s0: event time (watermark")) << logged;
  EXPECT_TRUE(absl::StrContains(logged, "on input channel 1 (subpartition 0 of p-s1")) << logged;
  EXPECT_FALSE(absl::StrContains(logged, "on input channel 0")) << "the channel that moved on is not named";
}

TEST(TaskTest, BoundedChainRunsTheLifecycleInOrder) {
  Harness h;
  std::unique_ptr<Task> task = h.MakeTask(1000, /*unbounded=*/false);
  task->Start();
  WaitDone(*task);
  EXPECT_THAT(h.listener.states(), ElementsAre(v1::TASK_DEPLOYING, v1::TASK_RUNNING, v1::TASK_FINISHED));
  absl::MutexLock lock(&h.trace.mu);
  EXPECT_THAT(h.trace.events, ElementsAre("initialize", "open", "close"));
  ASSERT_EQ(h.trace.sunk.size(), 1000u);
  EXPECT_EQ(h.trace.sunk.back(), 999);
  EXPECT_EQ(task->Metrics().records_in(), 1000);
  EXPECT_EQ(task->Metrics().records_out(), 1000);
  EXPECT_EQ(h.loader->acquired_, 1);
  EXPECT_EQ(h.loader->released_, 1);
}

// Mails run on the task thread, between two polls, also while the source is
// idle; a snapshot taken in a mail holds the source's position.
TEST(TaskTest, MailsRunOnTheTaskThreadBetweenRecords) {
  Harness h;
  std::unique_ptr<Task> task = h.MakeTask(500, /*unbounded=*/true);
  task->Start();
  absl::Notification snapshotted;
  ChainSnapshot snapshot;
  bool on_task_thread = false, between_polls = false;
  // Posted before the chain is open: waits for it.
  ASSERT_TRUE(task->PostMail("snapshot 1", [&](OperatorChain* chain) {
    on_task_thread = std::this_thread::get_id() == h.trace.task_thread.load();
    between_polls = !h.trace.in_poll;
    chain->PrepareSnapshotPreBarrier(1);
    auto taken = chain->SnapshotState(CheckpointInfo{1, 0});
    if (!taken.ok()) return taken.status();
    snapshot = std::move(*taken);
    snapshotted.Notify();
    return absl::OkStatus();
  }));
  ASSERT_TRUE(snapshotted.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(on_task_thread);
  EXPECT_TRUE(between_polls);
  ASSERT_EQ(snapshot.operators.size(), 2u);
  const std::vector<std::string>& position = snapshot.operators[0].operator_state.at("position").entries;
  ASSERT_EQ(position.size(), 1u);

  // The source is idle now (all 500 emitted); a mail still runs at once.
  absl::Notification completed;
  ASSERT_TRUE(task->PostMail("complete 1", [&](OperatorChain* chain) {
    chain->NotifyCheckpointComplete(1);
    completed.Notify();
    return absl::OkStatus();
  }));
  ASSERT_TRUE(completed.WaitForNotificationWithTimeout(absl::Seconds(30)));

  // A failing mail fails the task with its description.
  ASSERT_TRUE(task->PostMail("trigger checkpoint 2", [](OperatorChain*) {
    return absl::UnavailableError("state backend unavailable");
  }));
  WaitDone(*task);
  EXPECT_EQ(h.listener.states().back(), v1::TASK_FAILED);
  EXPECT_EQ(h.listener.error(), "trigger checkpoint 2: state backend unavailable");
  EXPECT_FALSE(task->PostMail("late", [](OperatorChain*) { return absl::OkStatus(); }));
  absl::MutexLock lock(&h.trace.mu);
  EXPECT_THAT(h.trace.events, ElementsAre("initialize", "open", "snapshot 1", "complete 1", "close"));
}

TEST(TaskTest, CancelEndsAnIdleTask) {
  Harness h;
  std::unique_ptr<Task> task = h.MakeTask(10, /*unbounded=*/true);
  task->Start();
  for (int i = 0; i < 30000 && h.listener.states().size() < 2; ++i) absl::SleepFor(absl::Milliseconds(1));
  task->Cancel("test");
  WaitDone(*task);
  EXPECT_EQ(h.listener.states().back(), v1::TASK_CANCELED);
}

// Counts records; notes each OnIdle that follows new records.
class IdleRecordingSink final : public StreamOperator {
 public:
  explicit IdleRecordingSink(Trace* trace) : trace_(trace) {}
  void Open(OperatorContext&, RecordOutput*) override {}
  void Process(void*) override { ++records_; }
  void OnIdle() override {
    if (records_ == reported_) return;
    reported_ = records_;
    trace_->Add(absl::StrCat("idle after ", records_));
  }

 private:
  Trace* const trace_;
  int64_t records_ = 0, reported_ = 0;
};

// When its input runs dry, a task tells its operators (OnIdle), so that a
// sink that batches sends what it holds without waiting for more input.
TEST(TaskTest, OperatorsHearWhenTheInputRunsDry) {
  Harness h;
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  VertexSpec sink;
  sink.name = "idle-recorder";
  sink.kind = VertexSpec::Kind::kSink;
  sink.operator_factory = [trace = &h.trace] { return std::make_unique<IdleRecordingSink>(trace); };
  env.AddSource<int64_t>("numbers", [trace = &h.trace] {
       return std::make_unique<CountingSource>(trace, 10, /*unbounded=*/true);
     }).Attach(std::move(sink));
  h.loader = std::make_unique<FakeLoader>(job);
  TaskEnvironment task_env;
  task_env.taskmanager_id = "tm-test";
  task_env.artifacts = h.loader.get();
  task_env.partitions = &h.partitions;
  task_env.listener = &h.listener;
  auto task = std::make_unique<Task>(Descriptor(), task_env);
  task->Start();
  bool idle = false;
  for (int i = 0; i < 30000 && !idle; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
    absl::MutexLock lock(&h.trace.mu);
    idle = std::find(h.trace.events.begin(), h.trace.events.end(), "idle after 10") != h.trace.events.end();
  }
  EXPECT_TRUE(idle);
  task->Cancel("test");
  WaitDone(*task);
  absl::MutexLock lock(&h.trace.mu);
  // All ten records were in before the first idle moment.
  EXPECT_THAT(h.trace.events, ElementsAre("initialize", "open", "idle after 10", "close"));
}

// A chain restored from a snapshot gives its operators their state back.
TEST(OperatorChainTest, RestoresOperatorStateIntoTheSource) {
  Trace trace;
  auto job = CountingJob(&trace, 100, /*unbounded=*/false);
  network::PartitionManager partitions;
  std::atomic<int64_t> in{0}, out{0};
  const v1::TaskDeploymentDescriptor tdd = Descriptor();
  OperatorChainOptions options;
  options.partitions = &partitions;

  ChainSnapshot snapshot;
  {
    auto chain = OperatorChain::Create(tdd, *job, options, ChainCounters{&in, &out});
    ASSERT_TRUE(chain.ok()) << chain.status();
    (*chain)->InitializeStateAndOpen();
    for (int i = 0; i < 42; ++i) (*chain)->source()->PollNext();
    auto taken = (*chain)->SnapshotState(CheckpointInfo{7, 0});
    ASSERT_TRUE(taken.ok()) << taken.status();
    snapshot = std::move(*taken);
  }
  auto restored = OperatorChain::Create(tdd, *job, options, ChainCounters{&in, &out}, &snapshot);
  ASSERT_TRUE(restored.ok()) << restored.status();
  (*restored)->InitializeStateAndOpen();
  EXPECT_EQ(trace.restored_from, 42);
  (*restored)->source()->PollNext();
  absl::MutexLock lock(&trace.mu);
  EXPECT_EQ(trace.sunk.back(), 42);
  EXPECT_THAT(trace.events, ElementsAre("initialize", "open", "snapshot 7", "close", "initialize-restored", "open"));
}

// Timers through a chain whose head is keyed: records set an event-time
// timer at the end of their 10-ms window and a processing-time timer; the
// event-time timers fire in order as the watermark reaches the operator,
// with their key and before the watermark goes on, and what they emit
// carries the timer's time. Processing-time timers fire from
// FireProcessingTimers.
class TimedStringSink final : public StreamOperator {
 public:
  explicit TimedStringSink(Trace* trace) : trace_(trace) {}
  void Open(OperatorContext& context, RecordOutput*) override { context_ = &context; }
  void Process(void* record) override {
    trace_->Add(absl::StrCat(*static_cast<std::string*>(record), "@", context_->current_timestamp()));
  }
  int64_t OnWatermark(int64_t watermark) override {
    trace_->Add(absl::StrCat("watermark ", watermark));
    return watermark;
  }

 private:
  Trace* const trace_;
  OperatorContext* context_ = nullptr;
};

// Vertices 1 and 2 of `job` — a keyed operator fed by vertex 0 and what
// follows it — as one chain on the heap backend, opened.
struct KeyedChain {
  explicit KeyedChain(const jobgraph::LoadedJob& job) {
    tdd.clear_vertex_ids();
    tdd.add_vertex_ids(1);
    tdd.add_vertex_ids(2);
    tdd.set_input_vertex(0);
    OperatorChainOptions options;
    options.partitions = &partitions;
    options.state_backend = "hashmap";
    auto created = OperatorChain::Create(tdd, job, options, ChainCounters{&in, &out});
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return;
    chain = std::move(*created);
    chain->InitializeStateAndOpen();
  }

  v1::TaskDeploymentDescriptor tdd = Descriptor();  // the chain refers to it
  network::PartitionManager partitions;
  std::atomic<int64_t> in{0}, out{0};
  std::unique_ptr<OperatorChain> chain;
};

TEST(OperatorChainTest, KeyedTimersFireWithTheirKeyAsEventTimeAndTheClockPass) {
  Trace trace;
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  VertexSpec sink;
  sink.name = "sink";
  sink.kind = VertexSpec::Kind::kSink;
  sink.operator_factory = [&trace] { return std::make_unique<TimedStringSink>(&trace); };
  env.AddSource<int64_t>("numbers", [] { return std::unique_ptr<SourceFunction<int64_t>>(); })
      .KeyBy([](const int64_t& v) { return v % 2 == 0 ? std::string("even") : std::string("odd"); })
      .Process<std::string>(
          [](const int64_t& v, KeyedContext<std::string>& ctx, Collector<std::string>& out) {
            auto count = ctx.State<int64_t>("count");
            count.Set(count.Get().value_or(0) + 1);
            const int64_t window_end = ctx.timestamp() / 10 * 10 + 9;
            ctx.RegisterEventTimeTimer(window_end);
            if (v == 7) ctx.RegisterProcessingTimeTimer(1);  // long due
            if (v == 7 && ctx.CurrentWatermark() == kMinWatermark) out.Collect("no watermark yet");
          },
          [](const TimerInfo& timer, KeyedContext<std::string>& ctx, Collector<std::string>& out) {
            auto count = ctx.State<int64_t>("count");
            out.Collect(absl::StrCat(timer.domain == TimeDomain::kEventTime ? "event " : "processing ", ctx.key(),
                                     " ", count.Get().value_or(0), " at ", timer.time, " ts ", ctx.timestamp()));
          })
      .Attach(std::move(sink));

  auto capture = std::make_shared<weir::testing::LogCapture>();
  logging::Get("task")->sinks().push_back(capture);
  const absl::Cleanup remove_capture = [] { logging::Get("task")->sinks().pop_back(); };
  KeyedChain keyed(*job);
  ASSERT_NE(keyed.chain, nullptr);
  OperatorChain* chain = keyed.chain.get();
  EXPECT_EQ(chain->NextProcessingTimer(), std::nullopt);
  for (int64_t v : {3, 4, 7, 12, 15}) {
    chain->SetElementTimestamp(v);
    chain->input()->Emit(&v);
  }
  chain->SetElementTimestamp(kNoTimestamp);
  EXPECT_EQ(chain->NextProcessingTimer(), 1);
  chain->ProcessWatermark(9);
  chain->FireProcessingTimers(1000);
  chain->ProcessWatermark(kMaxWatermark);
  EXPECT_EQ(chain->NextProcessingTimer(), std::nullopt);
  absl::MutexLock lock(&trace.mu);
  EXPECT_THAT(trace.events,
              ElementsAre("no watermark yet@7",
                          // Counts are the keys' totals (every record came first):
                          // even 4 and 12, odd 3, 7 and 15; one time fires by key.
                          "event even 2 at 9 ts 9@9", "event odd 3 at 9 ts 9@9", "watermark 9",
                          "processing odd 3 at 1 ts " + absl::StrCat(kNoTimestamp) + "@" + absl::StrCat(kNoTimestamp),
                          "event even 2 at 19 ts 19@19", "event odd 3 at 19 ts 19@19",
                          "watermark " + absl::StrCat(kMaxWatermark)));
  // The source has no watermark strategy (the test drives the watermark by
  // hand): the operator's first event-time timer says so, once.
  const std::string warned = "operator 'KeyedProcess' registered an event-time timer (at 9), but no watermark "
                             "strategy is upstream of it";
  EXPECT_THAT(capture->text(), ::testing::HasSubstr(warned));
  EXPECT_EQ(capture->text().find(warned), capture->text().rfind(warned)) << capture->text();
}

TEST(OperatorChainTest, ATimerWithoutOnTimerIsRefusedNamingTheOperator) {
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  env.AddSource<int64_t>("numbers", [] { return std::unique_ptr<SourceFunction<int64_t>>(); })
      .KeyBy([](const int64_t& v) { return v; })
      .Process<int64_t>([](const int64_t& v, KeyedContext<int64_t>& ctx, Collector<int64_t>&) {
        ctx.RegisterEventTimeTimer(v);
      })
      .Sink("sink", [](const int64_t&) {});
  KeyedChain keyed(*job);
  ASSERT_NE(keyed.chain, nullptr);
  OperatorChain* chain = keyed.chain.get();
  int64_t v = 5;
  try {
    chain->input()->Emit(&v);
    ADD_FAILURE() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("operator 'KeyedProcess' uses timers"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("Process(fn, on_timer)"));
  }
}

}  // namespace
}  // namespace weir::taskmanager
