// A task at the end of a bounded input, with a final checkpoint: the order
// end of data -> EndInput -> final barrier -> completion -> FINISHED, a
// restore from a snapshot taken after EndInput (which does not run it
// again), and a task restored as finished (which runs no operator).
#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/checkpointing/snapshot_file.h"
#include "taskmanager/checkpointing/subtask_checkpointer.h"
#include "taskmanager/network/result_partition.h"
#include "taskmanager/task.h"
#include "tests/testing/process.h"
#include "weir/datastream.h"

namespace weir::taskmanager {
namespace {

using ::testing::ElementsAre;
using weir::testing::WaitFor;

constexpr absl::Duration kGuard = absl::Seconds(30);

// What the operators of the job did, in order.
struct Trace {
  absl::Mutex mu;
  std::vector<std::string> events ABSL_GUARDED_BY(mu);
  void Add(std::string event) {
    absl::MutexLock lock(&mu);
    events.push_back(std::move(event));
  }
  std::vector<std::string> Events() {
    absl::MutexLock lock(&mu);
    return events;
  }
  bool Has(const std::string& event) {
    absl::MutexLock lock(&mu);
    return std::find(events.begin(), events.end(), event) != events.end();
  }
};

class Responder final : public CheckpointResponder {
 public:
  void Acknowledge(const v1::AcknowledgeCheckpointRequest& ack) override {
    absl::MutexLock lock(&mu_);
    acks_.push_back(ack);
  }
  void Decline(const v1::DeclineCheckpointRequest& decline) override {
    absl::MutexLock lock(&mu_);
    declines_.push_back(decline.reason());
  }
  std::vector<v1::AcknowledgeCheckpointRequest> acks() {
    absl::MutexLock lock(&mu_);
    return acks_;
  }
  std::vector<std::string> declines() {
    absl::MutexLock lock(&mu_);
    return declines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::AcknowledgeCheckpointRequest> acks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> declines_ ABSL_GUARDED_BY(mu_);
};

class Listener final : public TaskStateListener {
 public:
  void OnTaskState(const v1::TaskStateUpdate& update) override {
    absl::MutexLock lock(&mu_);
    last_ = update.state();
    input_ended_ = input_ended_ || update.input_ended();
  }
  v1::TaskState last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }
  bool input_ended() {
    absl::MutexLock lock(&mu_);
    return input_ended_;
  }

 private:
  absl::Mutex mu_;
  v1::TaskState last_ ABSL_GUARDED_BY(mu_) = v1::TASK_SCHEDULED;
  bool input_ended_ ABSL_GUARDED_BY(mu_) = false;
};

class Loader final : public JobLoader {
 public:
  explicit Loader(std::shared_ptr<jobgraph::LoadedJob> job) : job_(std::move(job)) {}
  absl::StatusOr<std::shared_ptr<jobgraph::LoadedJob>> Acquire(const std::string&, const std::string&,
                                                               const std::vector<std::string>&, const std::string&,
                                                               Cancellation*) override {
    return job_;
  }
  void Release(const std::string&) override {}

 private:
  std::shared_ptr<jobgraph::LoadedJob> job_;
};

// Emits 0, 1, 2, then ends; its position is operator state.
class ThreeNumbers final : public SourceFunction<int64_t> {
 public:
  explicit ThreeNumbers(Trace* trace) : trace_(trace) {}
  void InitializeState(OperatorContext& context) override {
    position_ = OperatorList<int64_t>(context.operator_state()->GetListState("position"));
    for (int64_t p : position_.Get()) next_ = p;
  }
  SourceStatus Poll(Collector<int64_t>& out) override {
    if (next_ >= 3) return SourceStatus::kEndOfInput;
    trace_->Add(absl::StrCat("poll ", next_));
    out.Collect(next_++);
    return SourceStatus::kMoreAvailable;
  }
  void SnapshotState(const CheckpointInfo&) override { position_.Update({next_}); }

 private:
  Trace* const trace_;
  OperatorList<int64_t> position_;
  int64_t next_ = 0;
};

// A sink that, like a two-phase-commit sink, writes what it holds at its
// end of input and commits with checkpoints; it says when each hook ran.
class EndingSink final : public StreamOperator {
 public:
  explicit EndingSink(Trace* trace) : trace_(trace) {}
  void Open(OperatorContext& context, RecordOutput*) override {
    trace_->Add(context.is_restored() ? "open restored" : "open");
  }
  void Process(void* record) override { trace_->Add(absl::StrCat("sink ", *static_cast<int64_t*>(record))); }
  void EndInput() override { trace_->Add("end input"); }
  void PrepareSnapshotPreBarrier(int64_t id) override { trace_->Add(absl::StrCat("pre-barrier ", id)); }
  void SnapshotState(const CheckpointInfo& checkpoint) override {
    trace_->Add(absl::StrCat("snapshot ", checkpoint.checkpoint_id));
  }
  void NotifyCheckpointComplete(int64_t id) override { trace_->Add(absl::StrCat("commit ", id)); }

 private:
  Trace* const trace_;
};

class EndOfInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = std::make_shared<jobgraph::LoadedJob>();
    StreamEnvironment env(&job_->graph);
    Trace* trace = &trace_;
    DataStream<int64_t> numbers =
        env.AddSource<int64_t>("numbers", [trace] { return std::make_unique<ThreeNumbers>(trace); });
    VertexSpec sink;
    sink.name = "ending sink";
    sink.kind = VertexSpec::Kind::kSink;
    sink.operator_factory = [trace] { return std::make_unique<EndingSink>(trace); };
    numbers.Attach(std::move(sink));
    loader_ = std::make_unique<Loader>(job_);
    env_.taskmanager_id = "tm";
    env_.artifacts = loader_.get();
    env_.partitions = &partitions_;
    env_.listener = &listener_;
    env_.uploader = &uploader_;
    env_.checkpoint_responder = &responder_;
    dir_ = weir::testing::MakeTempDir("weir-end");
    tdd_.set_job_id("job");
    tdd_.set_attempt(1);
    tdd_.set_task_id("job/1/c0s0");
    tdd_.add_vertex_ids(0);
    tdd_.add_vertex_ids(1);
    tdd_.add_operator_uids("numbers");
    tdd_.add_operator_uids("ending sink");
    tdd_.set_parallelism(1);
    tdd_.set_input_vertex(-1);
    tdd_.set_checkpoint_dir(dir_);
    tdd_.set_final_checkpoint(true);
  }

  // Triggers checkpoint `id` at `task` and waits for its acknowledgement.
  v1::AcknowledgeCheckpointRequest Checkpoint(Task& task, int64_t id) {
    std::filesystem::create_directories(absl::StrCat(dir_, "/chk-", id));
    const size_t before = responder_.acks().size();
    EXPECT_TRUE(task.TriggerCheckpoint(id, 0).ok());
    EXPECT_TRUE(WaitFor([&] { return responder_.acks().size() > before; }, kGuard));
    return responder_.acks().back();
  }

  Trace trace_;
  std::shared_ptr<jobgraph::LoadedJob> job_;
  std::unique_ptr<Loader> loader_;
  network::PartitionManager partitions_;
  Listener listener_;
  SnapshotUploader uploader_;
  Responder responder_;
  TaskEnvironment env_;
  std::string dir_;
  v1::TaskDeploymentDescriptor tdd_;
};

// EndInput comes before the final checkpoint's barrier, so that what the
// operators write at their end is in that checkpoint (and committed with
// it); the task ends only once that checkpoint completed.
TEST_F(EndOfInputTest, EndInputRunsBeforeTheFinalBarrierAndTheTaskEndsOnItsCompletion) {
  v1::AcknowledgeCheckpointRequest ack;
  {
    Task task(tdd_, env_);
    task.Start();
    ASSERT_TRUE(WaitFor([&] { return listener_.input_ended(); }, kGuard));
    EXPECT_TRUE(trace_.Has("end input")) << "the input-ended report came before EndInput";
    ack = Checkpoint(task, 1);
    EXPECT_FALSE(task.done()) << "ended before its final checkpoint completed";
    task.NotifyCheckpoint(1, /*completed=*/true);
    ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
    EXPECT_EQ(listener_.last(), v1::TASK_FINISHED);
  }
  EXPECT_THAT(trace_.Events(), ElementsAre("open", "poll 0", "sink 0", "poll 1", "sink 1", "poll 2", "sink 2",
                                           "end input", "pre-barrier 1", "snapshot 1", "commit 1"));
  absl::StatusOr<ChainSnapshot> snapshot = ReadTaskSnapshot(dir_ + "/chk-1", ack.state());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(snapshot->input_ended);

  // Restored from that checkpoint (a failure before the task ended): the
  // source reads nothing more, EndInput does not run again, and the task
  // again ends with a checkpoint of its own.
  v1::TaskDeploymentDescriptor restore = tdd_;
  restore.set_attempt(2);
  restore.set_task_id("job/2/c0s0");
  restore.set_restore_checkpoint_id(1);
  restore.set_restore_checkpoint_dir(dir_ + "/chk-1");
  *restore.add_restore_sources()->add_handles() = ack.state();
  {
    absl::MutexLock lock(&trace_.mu);
    trace_.events.clear();
  }
  {
    Task task(restore, env_);
    task.Start();
    ASSERT_TRUE(WaitFor([&] { return listener_.last() == v1::TASK_RUNNING && trace_.Has("open restored"); },
                        kGuard));
    Checkpoint(task, 2);
    task.NotifyCheckpoint(2, /*completed=*/true);
    ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
    EXPECT_EQ(listener_.last(), v1::TASK_FINISHED);
  }
  EXPECT_THAT(trace_.Events(), ElementsAre("open restored", "pre-barrier 2", "snapshot 2", "commit 2"));
}

// An aborted final checkpoint does not end the task: the next one does.
TEST_F(EndOfInputTest, AnAbortedFinalCheckpointIsFollowedByTheNextOne) {
  Task task(tdd_, env_);
  task.Start();
  ASSERT_TRUE(WaitFor([&] { return listener_.input_ended(); }, kGuard));
  Checkpoint(task, 1);
  task.NotifyCheckpoint(1, /*completed=*/false);
  Checkpoint(task, 2);
  EXPECT_FALSE(task.done());
  task.NotifyCheckpoint(2, /*completed=*/true);
  ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
  EXPECT_EQ(listener_.last(), v1::TASK_FINISHED);
  EXPECT_THAT(trace_.Events(), ::testing::IsSupersetOf({"snapshot 1", "snapshot 2", "commit 2"}));
  EXPECT_FALSE(trace_.Has("commit 1"));
}

// A task the restored checkpoint records as finished opens no operator (a
// sink would otherwise start transactions for nothing) and only ends its
// outputs: END_OF_DATA, then END_OF_INPUT.
TEST_F(EndOfInputTest, ATaskRestoredAsFinishedRunsNoOperatorAndEndsItsOutputs) {
  job_ = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job_->graph);
  Trace* trace = &trace_;
  DataStream<int64_t> numbers =
      env.AddSource<int64_t>("numbers", [trace] { return std::make_unique<ThreeNumbers>(trace); });
  numbers.Rebalance().Sink("drop", [](const int64_t&) {});
  Loader loader(job_);
  env_.artifacts = &loader;
  v1::TaskDeploymentDescriptor tdd = tdd_;
  tdd.clear_vertex_ids();
  tdd.add_vertex_ids(0);
  tdd.clear_operator_uids();
  tdd.add_operator_uids("numbers");
  tdd.set_finished_on_restore(true);
  tdd.set_restore_checkpoint_id(4);
  v1::OutputSpec* out = tdd.add_outputs();
  out->set_partition_id("p-out");
  out->set_target_vertex(1);
  out->set_partitioning(v1::REBALANCE);
  out->set_num_subpartitions(1);

  Task task(tdd, env_);
  task.Start();
  std::shared_ptr<network::ResultPartition> partition;
  ASSERT_TRUE(WaitFor([&] { return (partition = partitions_.Lookup("p-out")) != nullptr; }, kGuard));
  std::vector<network::Buffer::Kind> kinds;
  ASSERT_TRUE(WaitFor([&] {
    while (std::optional<network::Buffer> buffer = partition->Poll(0)) kinds.push_back(buffer->kind);
    return !kinds.empty() && kinds.back() == network::Buffer::Kind::kEndOfInput;
  }, kGuard));
  EXPECT_THAT(kinds, ElementsAre(network::Buffer::Kind::kEndOfData, network::Buffer::Kind::kEndOfInput));
  ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
  EXPECT_EQ(listener_.last(), v1::TASK_FINISHED);
  EXPECT_TRUE(trace_.Events().empty()) << "an operator ran";
}

}  // namespace
}  // namespace weir::taskmanager
