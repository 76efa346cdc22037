// The TaskManager's side of checkpoints: barrier handling (aligned and
// counting), alignment on a real InputGate under a full credit window,
// snapshot files, a task that takes a checkpoint and restores from it, and
// the end of a bounded input with its final checkpoint.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/checkpointing/barrier_handler.h"
#include "taskmanager/checkpointing/snapshot_file.h"
#include "taskmanager/checkpointing/subtask_checkpointer.h"
#include "taskmanager/network/input_gate.h"
#include "taskmanager/network/result_partition.h"
#include "taskmanager/state/in_memory_keyed_state.h"
#include "taskmanager/task.h"
#include "tests/testing/process.h"
#include "weir/datastream.h"

namespace weir::taskmanager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using weir::testing::WaitFor;

constexpr absl::Duration kGuard = absl::Seconds(30);

TEST(BarrierHandlerTest, AlignedBlocksEachChannelUntilAllBarriersAreIn) {
  auto handler = BarrierHandler::Create(v1::EXACTLY_ONCE, 3);
  const absl::Time t0 = absl::Now();
  BarrierDecision d = handler->OnBarrier(0, 5, 1000, t0);
  EXPECT_TRUE(d.block_channel);
  EXPECT_FALSE(d.trigger.has_value());
  d = handler->OnBarrier(2, 5, 1000, t0 + absl::Milliseconds(3));
  EXPECT_TRUE(d.block_channel);
  EXPECT_EQ(handler->pending(), 5);
  d = handler->OnBarrier(1, 5, 1000, t0 + absl::Milliseconds(10));
  EXPECT_FALSE(d.block_channel);
  EXPECT_TRUE(d.unblock_all);
  ASSERT_EQ(d.trigger, 5);
  EXPECT_EQ(d.trigger_timestamp_ms, 1000);
  EXPECT_EQ(d.alignment, absl::Milliseconds(10));
  // A late barrier of a checkpoint already taken changes nothing.
  d = handler->OnBarrier(1, 5, 1000, t0);
  EXPECT_FALSE(d.block_channel || d.trigger.has_value());
  EXPECT_FALSE(handler->pending().has_value());
}

TEST(BarrierHandlerTest, AlignedCountsFinishedChannelsAndGivesUpOverlappedCheckpoints) {
  auto handler = BarrierHandler::Create(v1::EXACTLY_ONCE, 2);
  const absl::Time now = absl::Now();
  EXPECT_TRUE(handler->OnBarrier(0, 1, 0, now).block_channel);
  // Channel 1 ends instead of sending barrier 1: it counts as arrived.
  BarrierDecision d = handler->OnEndOfInput(1, now);
  EXPECT_EQ(d.trigger, 1);
  EXPECT_TRUE(d.unblock_all);
  // From now on one barrier on channel 0 is enough.
  EXPECT_EQ(handler->OnBarrier(0, 2, 0, now).trigger, 2);

  auto other = BarrierHandler::Create(v1::EXACTLY_ONCE, 2);
  EXPECT_TRUE(other->OnBarrier(0, 7, 0, now).block_channel);
  d = other->OnBarrier(0, 8, 0, now);  // 8 overtakes 7 before 7 aligned
  EXPECT_EQ(d.abandoned, 7);
  EXPECT_TRUE(d.unblock_all);
  EXPECT_TRUE(d.block_channel);
  EXPECT_FALSE(other->OnBarrier(1, 7, 0, now).trigger.has_value());
  EXPECT_EQ(other->OnBarrier(1, 8, 0, now).trigger, 8);
}

// A newer barrier gives up an alignment: once its decision is carried out,
// the channel that brought the newer barrier is held (what follows the
// barrier on it belongs after that checkpoint) and the channels held for the
// older checkpoint are released.
TEST(BarrierHandlerTest, AGivenUpAlignmentHoldsOnlyTheChannelOfTheNewerBarrier) {
  network::PartitionManager partitions;
  std::vector<network::InputChannelSpec> specs;
  for (int i = 0; i < 3; ++i) {
    const std::string id = absl::StrCat("p", i);
    ASSERT_TRUE(partitions.Register(std::make_shared<network::ResultPartition>(id, 1, 4)).ok());
    specs.push_back({id, 0, "local", true});
  }
  auto gate = network::InputGate::Create("t", specs, &partitions);
  ASSERT_TRUE(gate.ok()) << gate.status();
  auto handler = BarrierHandler::Create(v1::EXACTLY_ONCE, 3);
  const absl::Time now = absl::Now();
  auto blocked = [&] {
    std::vector<int> out;
    for (int c = 0; c < 3; ++c) {
      if ((*gate)->channel_blocked(c)) out.push_back(c);
    }
    return out;
  };

  ApplyToChannels(handler->OnBarrier(0, 7, 0, now), 0, **gate);
  EXPECT_THAT(blocked(), ::testing::ElementsAre(0));
  // Channel 1's producer gave up 7: its first barrier is 8.
  BarrierDecision d = handler->OnBarrier(1, 8, 0, now);
  EXPECT_EQ(d.abandoned, 7);
  ApplyToChannels(d, 1, **gate);
  EXPECT_THAT(blocked(), ::testing::ElementsAre(1));
  EXPECT_EQ(handler->pending(), 8);
  ApplyToChannels(handler->OnBarrier(0, 8, 0, now), 0, **gate);
  EXPECT_THAT(blocked(), ::testing::ElementsAre(0, 1));
  d = handler->OnBarrier(2, 8, 0, now);
  EXPECT_EQ(d.trigger, 8);
  ApplyToChannels(d, 2, **gate);
  EXPECT_THAT(blocked(), ::testing::IsEmpty());
}

TEST(BarrierHandlerTest, CountingNeverBlocks) {
  auto handler = BarrierHandler::Create(v1::AT_LEAST_ONCE, 2);
  const absl::Time now = absl::Now();
  BarrierDecision d = handler->OnBarrier(1, 3, 0, now);
  EXPECT_FALSE(d.block_channel);
  EXPECT_FALSE(d.trigger.has_value());
  d = handler->OnBarrier(0, 3, 0, now);
  EXPECT_EQ(d.trigger, 3);
  EXPECT_FALSE(d.unblock_all);
}

// AT_LEAST_ONCE with several checkpoints in progress
// (max-concurrent-checkpoints > 1): barrier 2 overtakes 1 on the fast
// channel, and each is still taken once its barrier arrived on every
// channel, with its own timestamp and alignment time.
TEST(BarrierHandlerTest, CountingTakesOverlappingCheckpointsEachWhenComplete) {
  auto handler = BarrierHandler::Create(v1::AT_LEAST_ONCE, 2);
  const absl::Time t0 = absl::Now();
  BarrierDecision d = handler->OnBarrier(0, 1, 100, t0);
  EXPECT_FALSE(d.trigger.has_value());
  d = handler->OnBarrier(0, 2, 200, t0 + absl::Milliseconds(5));
  EXPECT_FALSE(d.abandoned.has_value()) << "checkpoint 1 given up for 2";
  EXPECT_FALSE(d.trigger.has_value());
  EXPECT_EQ(handler->pending(), 1);
  d = handler->OnBarrier(1, 1, 100, t0 + absl::Milliseconds(10));
  ASSERT_EQ(d.trigger, 1);
  EXPECT_EQ(d.trigger_timestamp_ms, 100);
  EXPECT_EQ(d.alignment, absl::Milliseconds(10));
  EXPECT_FALSE(d.abandoned.has_value());
  EXPECT_FALSE(d.block_channel || d.unblock_all);
  EXPECT_EQ(handler->pending(), 2);
  d = handler->OnBarrier(1, 2, 200, t0 + absl::Milliseconds(20));
  ASSERT_EQ(d.trigger, 2);
  EXPECT_EQ(d.trigger_timestamp_ms, 200);
  EXPECT_EQ(d.alignment, absl::Milliseconds(15));
  EXPECT_FALSE(handler->pending().has_value());
}

// What the counting handler keeps stays bounded: a checkpoint taken drops
// the counts of older ones (a channel skipped them: they cannot complete),
// their late barriers change nothing, and neither does the first barrier of
// a checkpoint older than one already counted.
TEST(BarrierHandlerTest, CountingForgetsCheckpointsThatCanNoLongerComplete) {
  auto handler = BarrierHandler::Create(v1::AT_LEAST_ONCE, 3);
  const absl::Time now = absl::Now();
  EXPECT_FALSE(handler->OnBarrier(0, 1, 0, now).trigger.has_value());
  // Channels 1 and 2 never bring barrier 1 (their producers gave it up).
  EXPECT_FALSE(handler->OnBarrier(0, 2, 0, now).trigger.has_value());
  EXPECT_FALSE(handler->OnBarrier(1, 2, 0, now).trigger.has_value());
  EXPECT_EQ(handler->OnBarrier(2, 2, 0, now).trigger, 2);
  EXPECT_FALSE(handler->pending().has_value()) << "checkpoint 1 is still counted";
  EXPECT_FALSE(handler->OnBarrier(1, 1, 0, now).trigger.has_value());
  EXPECT_FALSE(handler->pending().has_value());

  // Checkpoint 4 counted on channel 0, which skipped 3: 3 cannot complete.
  EXPECT_FALSE(handler->OnBarrier(0, 4, 0, now).trigger.has_value());
  EXPECT_FALSE(handler->OnBarrier(1, 3, 0, now).trigger.has_value());
  EXPECT_EQ(handler->pending(), 4);

  // A channel that ends counts as arrived for every checkpoint counted;
  // when that completes several at once, the newest is taken.
  EXPECT_FALSE(handler->OnBarrier(1, 4, 0, now).trigger.has_value());
  EXPECT_FALSE(handler->OnBarrier(0, 5, 0, now).trigger.has_value());
  EXPECT_FALSE(handler->OnBarrier(1, 5, 0, now).trigger.has_value());
  BarrierDecision d = handler->OnEndOfInput(2, now);
  EXPECT_EQ(d.trigger, 5);
  EXPECT_FALSE(handler->pending().has_value());
  // From now on channels 0 and 1 are enough.
  EXPECT_FALSE(handler->OnBarrier(1, 6, 0, now).trigger.has_value());
  EXPECT_EQ(handler->OnBarrier(0, 6, 0, now).trigger, 6);

  // A channel that never brings a barrier (its producer is stuck) does not
  // make the counts grow without end: the oldest go first.
  for (int64_t id = 7; id < 1007; ++id) handler->OnBarrier(0, id, 0, now);
  ASSERT_TRUE(handler->pending().has_value());
  EXPECT_GT(*handler->pending(), 900);
}

network::Buffer Data(const std::string& record) {
  network::Buffer buffer;
  network::AppendRecord(record, &buffer);
  return buffer;
}

std::string Record(const network::Buffer& buffer) {
  std::string out;
  EXPECT_TRUE(network::ForEachRecord(buffer, [&](absl::string_view b) { out = std::string(b); }).ok());
  return out;
}

// Alignment on a real gate: the held channel is not read while the other
// goes on, its producer blocks on a full subpartition instead of growing
// memory, and nothing deadlocks: once the last barrier arrives, all flows.
TEST(AlignmentTest, HeldChannelStopsWhileTheOtherContinuesWithoutDeadlock) {
  constexpr int kCapacity = 2;
  network::PartitionManager partitions;
  auto fast = std::make_shared<network::ResultPartition>("fast", 1, kCapacity);
  auto slow = std::make_shared<network::ResultPartition>("slow", 1, /*capacity=*/4);
  ASSERT_TRUE(partitions.Register(fast).ok());
  ASSERT_TRUE(partitions.Register(slow).ok());
  auto gate = network::InputGate::Create("t", {{"fast", 0, "local", true}, {"slow", 0, "local", true}}, &partitions);
  ASSERT_TRUE(gate.ok()) << gate.status();
  auto handler = BarrierHandler::Create(v1::EXACTLY_ONCE, 2);

  // The fast channel: its barrier at once, then more records than its
  // subpartition holds — the producer blocks until the channel is released.
  std::atomic<int> fast_added{0};
  std::thread fast_producer([&] {
    ASSERT_TRUE(fast->Add(0, network::Buffer::Barrier(1, 0)));
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(fast->Add(0, Data("f" + std::to_string(i))));
      ++fast_added;
    }
    ASSERT_TRUE(fast->Add(0, network::Buffer::EndOfInput()));
  });
  ASSERT_TRUE(slow->Add(0, Data("s0")));

  auto next = [&]() -> std::pair<int, network::Buffer> {
    std::optional<std::pair<int, network::Buffer>> got;
    EXPECT_TRUE(WaitFor([&] {
      auto n = (*gate)->Next(absl::ZeroDuration());
      EXPECT_TRUE(n.ok()) << n.status();
      if (n.ok() && n->has_value()) got = std::move(**n);
      return got.has_value();
    }, kGuard));
    return std::move(*got);
  };

  std::vector<std::string> slow_seen;
  bool triggered = false;
  // Read until the fast barrier arrives and blocks its channel.
  while (!(*gate)->channel_blocked(0)) {
    auto [channel, buffer] = next();
    if (buffer.kind == network::Buffer::Kind::kBarrier) {
      ApplyToChannels(handler->OnBarrier(channel, buffer.checkpoint_id, 0, absl::Now()), channel, **gate);
    } else {
      ASSERT_EQ(channel, 1);
      slow_seen.push_back(Record(buffer));
    }
  }
  // The fast producer fills its subpartition and stops there (backpressure).
  ASSERT_TRUE(WaitFor([&] { return fast->backpressured() && fast_added == kCapacity; }, kGuard));
  // The slow channel goes on meanwhile.
  ASSERT_TRUE(slow->Add(0, Data("s1")));
  ASSERT_TRUE(slow->Add(0, network::Buffer::Barrier(1, 0)));
  ASSERT_TRUE(slow->Add(0, network::Buffer::EndOfInput()));
  // Nobody reads the held channel, so its producer is still stuck there.
  EXPECT_EQ(fast_added, kCapacity);
  while (!triggered) {
    auto [channel, buffer] = next();
    ASSERT_EQ(channel, 1) << "read the held channel";
    if (buffer.kind == network::Buffer::Kind::kBarrier) {
      BarrierDecision d = handler->OnBarrier(channel, buffer.checkpoint_id, 0, absl::Now());
      ASSERT_EQ(d.trigger, 1);
      triggered = true;
      ApplyToChannels(d, channel, **gate);
    } else {
      slow_seen.push_back(Record(buffer));
    }
  }
  EXPECT_THAT(slow_seen, ::testing::ElementsAre("s0", "s1"));
  // Released: every fast record arrives, and the producer finishes.
  int fast_records = 0;
  while (!(*gate)->finished()) {
    auto n = (*gate)->Next(absl::Milliseconds(50));
    ASSERT_TRUE(n.ok()) << n.status();
    if (n->has_value() && (*n)->second.is_data()) ++fast_records;
  }
  fast_producer.join();
  EXPECT_EQ(fast_records, 10);
}

// In-process task with a real uploader and a responder that collects acks.
class CollectingResponder final : public CheckpointResponder {
 public:
  void Acknowledge(const v1::AcknowledgeCheckpointRequest& ack) override {
    absl::MutexLock lock(&mu_);
    acks_.push_back(ack);
  }
  void Decline(const v1::DeclineCheckpointRequest& decline) override {
    absl::MutexLock lock(&mu_);
    declines_.push_back(decline);
  }
  std::vector<v1::AcknowledgeCheckpointRequest> acks() {
    absl::MutexLock lock(&mu_);
    return acks_;
  }
  std::vector<v1::DeclineCheckpointRequest> declines() {
    absl::MutexLock lock(&mu_);
    return declines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::AcknowledgeCheckpointRequest> acks_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DeclineCheckpointRequest> declines_ ABSL_GUARDED_BY(mu_);
};

class NullListener final : public TaskStateListener {
 public:
  void OnTaskState(const v1::TaskStateUpdate& update) override {
    last = update.state();
    if (update.input_ended()) input_ended = true;
  }
  std::atomic<v1::TaskState> last{v1::TASK_SCHEDULED};
  // A report said the task's input ended (it waits for a final checkpoint).
  std::atomic<bool> input_ended{false};
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

// Emits 0, 1, 2, ... up to a limit, then idles; its position is operator state.
class Numbers final : public SourceFunction<int64_t> {
 public:
  Numbers(int64_t limit, std::atomic<int64_t>* restored_from) : limit_(limit), restored_from_(restored_from) {}
  void InitializeState(OperatorContext& ctx) override {
    position_ = OperatorList<int64_t>(ctx.operator_state()->GetListState("position"));
    for (int64_t p : position_.Get()) next_ = *restored_from_ = p;
  }
  SourceStatus Poll(Collector<int64_t>& out) override {
    if (next_ >= limit_) return SourceStatus::kNothingAvailable;
    out.Collect(next_++);
    return SourceStatus::kMoreAvailable;
  }
  void SnapshotState(const CheckpointInfo&) override { position_.Update({next_}); }

 private:
  const int64_t limit_;
  std::atomic<int64_t>* const restored_from_;
  OperatorList<int64_t> position_;
  int64_t next_ = 0;
};

// A source -> sink job of Numbers in-process, with a real uploader and a
// responder that collects what the tasks send.
class TaskCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = std::make_shared<jobgraph::LoadedJob>();
    StreamEnvironment env(&job_->graph);
    env.AddSource<int64_t>("numbers", [this] { return std::make_unique<Numbers>(100, &restored_from_); })
        .Sink("drop", [](const int64_t&) {});
    loader_ = std::make_unique<Loader>(job_);
    task_env_.taskmanager_id = "tm";
    task_env_.artifacts = loader_.get();
    task_env_.partitions = &partitions_;
    task_env_.listener = &listener_;
    task_env_.uploader = &uploader_;
    task_env_.checkpoint_responder = &responder_;
    tdd_.set_job_id("job");
    tdd_.set_attempt(1);
    tdd_.set_task_id("job/1/c0s0");
    tdd_.add_vertex_ids(0);
    tdd_.add_vertex_ids(1);
    tdd_.add_operator_uids("numbers");
    tdd_.add_operator_uids("drop");
    tdd_.set_parallelism(1);
    tdd_.set_input_vertex(-1);
  }

  std::atomic<int64_t> restored_from_{-1};
  std::shared_ptr<jobgraph::LoadedJob> job_;
  std::unique_ptr<Loader> loader_;
  network::PartitionManager partitions_;
  NullListener listener_;
  SnapshotUploader uploader_;
  CollectingResponder responder_;
  TaskEnvironment task_env_;
  v1::TaskDeploymentDescriptor tdd_;
};

TEST_F(TaskCheckpointTest, SourceTaskWritesItsSnapshotAcknowledgesAndRestores) {
  const std::string dir = weir::testing::MakeTempDir("weir-chk");
  std::atomic<int64_t>& restored_from = restored_from_;
  NullListener& listener = listener_;
  CollectingResponder& responder = responder_;
  const TaskEnvironment& task_env = task_env_;
  v1::TaskDeploymentDescriptor tdd = tdd_;
  tdd.set_checkpoint_dir(dir);
  std::filesystem::create_directories(dir + "/chk-3");

  {
    Task task(tdd, task_env);
    task.Start();
    ASSERT_TRUE(WaitFor([&] { return listener.last == v1::TASK_RUNNING; }, kGuard));
    ASSERT_TRUE(task.TriggerCheckpoint(3, 1234).ok());
    ASSERT_TRUE(WaitFor([&] { return !responder.acks().empty(); }, kGuard));
    task.Cancel("test over");
  }
  const v1::AcknowledgeCheckpointRequest ack = responder.acks()[0];
  EXPECT_EQ(ack.checkpoint_id(), 3);
  EXPECT_EQ(ack.task_id(), "job/1/c0s0");
  EXPECT_EQ(ack.state().file(), "v0-s0.snapshot");
  EXPECT_EQ(std::filesystem::file_size(dir + "/chk-3/" + ack.state().file()),
            static_cast<uintmax_t>(ack.state().size_bytes()));
  absl::StatusOr<ChainSnapshot> read = ReadTaskSnapshot(dir + "/chk-3", ack.state());
  ASSERT_TRUE(read.ok()) << read.status();
  const int64_t position = Serializer<int64_t>::Read(read->operators[0].operator_state.at("position").entries.at(0));
  EXPECT_GE(position, 0);
  EXPECT_LE(position, 100);

  // A new attempt restored from that checkpoint starts where it was.
  v1::TaskDeploymentDescriptor restore = tdd;
  restore.set_attempt(2);
  restore.set_task_id("job/2/c0s0");
  restore.set_restore_checkpoint_id(3);
  restore.set_restore_checkpoint_dir(dir + "/chk-3");
  *restore.add_restore_sources()->add_handles() = ack.state();
  listener.last = v1::TASK_SCHEDULED;
  {
    Task task(restore, task_env);
    task.Start();
    ASSERT_TRUE(WaitFor([&] { return listener.last == v1::TASK_RUNNING; }, kGuard));
    task.Cancel("test over");
  }
  EXPECT_EQ(restored_from, position);

  // A corrupted snapshot is refused with the reason, and the task fails.
  {
    std::fstream f(dir + "/chk-3/" + ack.state().file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x7f');
  }
  absl::StatusOr<ChainSnapshot> corrupt = ReadTaskSnapshot(dir + "/chk-3", ack.state());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corrupt.status().message(), HasSubstr("SHA-256"));
  listener.last = v1::TASK_SCHEDULED;
  {
    Task task(restore, task_env);
    task.Start();
    ASSERT_TRUE(WaitFor([&] { return listener.last == v1::TASK_FAILED; }, kGuard));
  }
}

// A source whose output is full (nobody reads it) takes a trigger at once:
// its blocked buffer goes over capacity, it snapshots and acknowledges, and
// its barrier queues behind the data. Before, it waited for room forever.
TEST_F(TaskCheckpointTest, ABackpressuredSourceTakesTheTriggerAndItsBarrierQueuesBehindTheData) {
  auto job = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job->graph);
  std::atomic<int64_t> unused{-1};
  env.AddSource<int64_t>("numbers", [&unused] { return std::make_unique<Numbers>(1LL << 40, &unused); })
      .Rebalance()
      .Sink("drop", [](const int64_t&) {});
  Loader loader(job);
  TaskEnvironment task_env = task_env_;
  task_env.artifacts = &loader;
  v1::TaskDeploymentDescriptor tdd = tdd_;
  tdd.clear_vertex_ids();
  tdd.add_vertex_ids(0);
  tdd.clear_operator_uids();
  tdd.add_operator_uids("numbers");
  v1::OutputSpec* out = tdd.add_outputs();
  out->set_partition_id("p-out");
  out->set_target_vertex(1);
  out->set_partitioning(v1::REBALANCE);
  out->set_num_subpartitions(1);
  const std::string dir = weir::testing::MakeTempDir("weir-chk");
  tdd.set_checkpoint_dir(dir);
  std::filesystem::create_directories(dir + "/chk-5");

  Task task(tdd, task_env);
  task.Start();
  std::shared_ptr<network::ResultPartition> partition;
  ASSERT_TRUE(WaitFor([&] { return (partition = partitions_.Lookup("p-out")) != nullptr; }, kGuard));
  ASSERT_TRUE(WaitFor([&] { return partition->backpressured(); }, kGuard));
  const int full = partition->buffered(0);
  EXPECT_EQ(full, partition->capacity());
  ASSERT_TRUE(task.TriggerCheckpoint(5, 1234).ok());
  ASSERT_TRUE(WaitFor([&] { return !responder_.acks().empty(); }, kGuard)) << "the trigger waited for room";
  EXPECT_EQ(responder_.acks()[0].checkpoint_id(), 5);
  // Blocked again once the mails ran, with the barrier behind the data.
  ASSERT_TRUE(WaitFor([&] { return partition->backpressured(); }, kGuard));
  std::vector<network::Buffer::Kind> kinds;
  while (std::optional<network::Buffer> buffer = partition->Poll(0)) {
    kinds.push_back(buffer->kind);
    if (buffer->kind == network::Buffer::Kind::kBarrier) break;
  }
  ASSERT_FALSE(kinds.empty());
  EXPECT_EQ(kinds.back(), network::Buffer::Kind::kBarrier);
  EXPECT_GT(kinds.size(), static_cast<size_t>(full)) << "the data before the barrier went over capacity";
  for (size_t i = 0; i + 1 < kinds.size(); ++i) EXPECT_EQ(kinds[i], network::Buffer::Kind::kData);
  task.Cancel("test over");
}

TEST_F(TaskCheckpointTest, ANonSourceOrCheckpointlessTaskDeclines) {
  NullListener& listener = listener_;
  CollectingResponder& responder = responder_;
  const TaskEnvironment& task_env = task_env_;
  const v1::TaskDeploymentDescriptor& tdd = tdd_;  // no checkpoint_dir: checkpoints off
  Task task(tdd, task_env);
  task.Start();
  ASSERT_TRUE(WaitFor([&] { return listener.last == v1::TASK_RUNNING; }, kGuard));
  ASSERT_TRUE(task.TriggerCheckpoint(1, 0).ok());
  ASSERT_TRUE(WaitFor([&] { return !responder.declines().empty(); }, kGuard));
  EXPECT_THAT(responder.declines()[0].reason(), HasSubstr("checkpoints off"));
  EXPECT_TRUE(responder.acks().empty());
  task.Cancel("test over");
}

// A task at the end of a bounded input, with a final checkpoint: the order
// end of data -> EndInput -> final barrier -> completion -> FINISHED, a
// restore from a snapshot taken after EndInput (which does not run it
// again), and a task restored as finished (which runs no operator).

// What the operators of the job did, in order.
struct EndTrace {
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




// Emits 0, 1, 2, then ends; its position is operator state.
class ThreeNumbers final : public SourceFunction<int64_t> {
 public:
  explicit ThreeNumbers(EndTrace* trace) : trace_(trace) {}
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
  EndTrace* const trace_;
  OperatorList<int64_t> position_;
  int64_t next_ = 0;
};

// A sink that, like a two-phase-commit sink, writes what it holds at its
// end of input and commits with checkpoints; it says when each hook ran.
class EndingSink final : public StreamOperator {
 public:
  explicit EndingSink(EndTrace* trace) : trace_(trace) {}
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
  EndTrace* const trace_;
};

class EndOfInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = std::make_shared<jobgraph::LoadedJob>();
    StreamEnvironment env(&job_->graph);
    EndTrace* trace = &trace_;
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

  EndTrace trace_;
  std::shared_ptr<jobgraph::LoadedJob> job_;
  std::unique_ptr<Loader> loader_;
  network::PartitionManager partitions_;
  NullListener listener_;
  SnapshotUploader uploader_;
  CollectingResponder responder_;
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
    ASSERT_TRUE(WaitFor([&] { return listener_.input_ended.load(); }, kGuard));
    EXPECT_TRUE(trace_.Has("end input")) << "the input-ended report came before EndInput";
    ack = Checkpoint(task, 1);
    EXPECT_FALSE(task.done()) << "ended before its final checkpoint completed";
    task.NotifyCheckpoint(1, /*completed=*/true);
    ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
    EXPECT_EQ(listener_.last.load(), v1::TASK_FINISHED);
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
    ASSERT_TRUE(WaitFor([&] { return listener_.last.load() == v1::TASK_RUNNING && trace_.Has("open restored"); },
                        kGuard));
    Checkpoint(task, 2);
    task.NotifyCheckpoint(2, /*completed=*/true);
    ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
    EXPECT_EQ(listener_.last.load(), v1::TASK_FINISHED);
  }
  EXPECT_THAT(trace_.Events(), ElementsAre("open restored", "pre-barrier 2", "snapshot 2", "commit 2"));
}

// An aborted final checkpoint does not end the task: the next one does.
TEST_F(EndOfInputTest, AnAbortedFinalCheckpointIsFollowedByTheNextOne) {
  Task task(tdd_, env_);
  task.Start();
  ASSERT_TRUE(WaitFor([&] { return listener_.input_ended.load(); }, kGuard));
  Checkpoint(task, 1);
  task.NotifyCheckpoint(1, /*completed=*/false);
  Checkpoint(task, 2);
  EXPECT_FALSE(task.done());
  task.NotifyCheckpoint(2, /*completed=*/true);
  ASSERT_TRUE(WaitFor([&] { return task.done(); }, kGuard));
  EXPECT_EQ(listener_.last.load(), v1::TASK_FINISHED);
  EXPECT_THAT(trace_.Events(), ::testing::IsSupersetOf({"snapshot 1", "snapshot 2", "commit 2"}));
  EXPECT_FALSE(trace_.Has("commit 1"));
}

// A task the restored checkpoint records as finished opens no operator (a
// sink would otherwise start transactions for nothing) and only ends its
// outputs: END_OF_DATA, then END_OF_INPUT.
TEST_F(EndOfInputTest, ATaskRestoredAsFinishedRunsNoOperatorAndEndsItsOutputs) {
  job_ = std::make_shared<jobgraph::LoadedJob>();
  StreamEnvironment env(&job_->graph);
  EndTrace* trace = &trace_;
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
  EXPECT_EQ(listener_.last.load(), v1::TASK_FINISHED);
  EXPECT_TRUE(trace_.Events().empty()) << "an operator ran";
}

// A task snapshot file carries an operator's keyed state whole: the
// backend's, and the pending entries beside it (a restore that dropped them
// would lose every window still in a write-back cache).
TEST(TaskSnapshotFileTest, KeyedStateKeepsItsPendingEntriesThroughTheFile) {
  const std::string dir = weir::testing::MakeTempDir("weir-chk-file");
  v1::TaskDeploymentDescriptor tdd;
  tdd.set_job_id("job");
  tdd.set_task_id("job/1/c0s0");
  tdd.add_vertex_ids(4);
  tdd.add_operator_uids("windows");
  tdd.set_parallelism(1);
  InMemoryKeyedState backend(state::KeyGroupRange{0, 128}, 128);
  backend.SetCurrentKey("k");
  backend.PutEntry("m", "stored", "1");
  const std::string value = "2";
  backend.AddPendingEntry("k", "m", "pending", &value);
  ChainSnapshot snapshot;
  snapshot.checkpoint_id = 7;
  absl::StatusOr<std::unique_ptr<KeyedStateSnapshot>> keyed = backend.Snapshot(7);
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  snapshot.operators.emplace_back().keyed = std::move(*keyed);
  absl::StatusOr<std::string> encoded = EncodeTaskSnapshot(tdd, snapshot, dir, nullptr);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  absl::StatusOr<v1::TaskStateHandle> handle = WriteTaskSnapshot(dir, tdd, *encoded, StateFilesSummary());
  ASSERT_TRUE(handle.ok()) << handle.status();
  absl::StatusOr<ChainSnapshot> read = ReadTaskSnapshot(dir, *handle);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->operators.size(), 1u);

  InMemoryKeyedState restored(state::KeyGroupRange{0, 128}, 128);
  ASSERT_TRUE(restored.Restore(read->operators[0].keyed_restore).ok());
  restored.SetCurrentKey("k");
  EXPECT_EQ(restored.GetEntry("m", "stored"), "1");
  EXPECT_EQ(restored.GetEntry("m", "pending"), "2");
}

}  // namespace
}  // namespace weir::taskmanager
