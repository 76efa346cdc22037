// KafkaTransactionalSink against the real broker, driven through its
// operator hooks in-process: each test stops a sink at one point of the
// two-phase commit (the sink is closed there, as a cancelled or failed task
// is; pre-committed transactions stay open, as after a crash), restores a new
// sink from the operator state of a chosen checkpoint, and checks what a
// read_committed reader sees and that no transaction is left open.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/state/operator_state.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/fake_operator_context.h"
#include "tests/testing/process.h"
#include "weir/datastream.h"
#include "weir/job_graph.h"
#include "weir/kafka.h"

namespace weir::connectors {
namespace {

using taskmanager::OperatorStateBackend;
using taskmanager::OperatorStateSnapshot;

// An operator context whose operator state starts from a snapshot.
class RestoringContext : public testing::FakeOperatorContext {
 public:
  RestoringContext(OperatorStateSnapshot restored, int subtask = 0, int parallelism = 1)
      : FakeOperatorContext(std::move(restored), subtask, parallelism, "transactional-sink-test") {}
};

class TransactionalSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = test::TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
    topic_ = test::UniqueTopicName("txn-sink");
    ASSERT_TRUE(test::CreateTopic(bootstrap_, topic_, 2).ok());
    prefix_ = absl::StrCat("test-", topic_);
  }

  // A started sink (InitializeState, Open) restored from `state`.
  std::unique_ptr<KafkaTransactionalSink> Start(RestoringContext& context) {
    JobGraph graph;
    StreamEnvironment env(&graph);
    kafka::Sink(kafka::Source(env, {.brokers = "unused:9092", .topics = {"unused"}}),
                {.brokers = bootstrap_,
                 .topic = topic_,
                 .guarantee = kafka::Guarantee::kExactlyOnce,
                 .transactional_id_prefix = prefix_});
    Properties properties = graph.vertices.at(1).properties;
    auto created = KafkaSinkConnector().CreateSink(properties);
    EXPECT_TRUE(created.ok()) << created.status();
    std::unique_ptr<KafkaTransactionalSink> sink(dynamic_cast<KafkaTransactionalSink*>(created->release()));
    sink->InitializeState(context);
    sink->Open(context, nullptr);
    return sink;
  }

  void Write(KafkaTransactionalSink& sink, int first, int n) {
    for (int i = first; i < first + n; ++i) {
      kafka::Record r{.key = absl::StrCat("k", i % 7), .value = absl::StrCat(i)};
      sink.Process(&r);
    }
  }

  // Barrier and snapshot of checkpoint `id`: the operator state it holds.
  OperatorStateSnapshot Checkpoint(KafkaTransactionalSink& sink, RestoringContext& context, int64_t id) {
    sink.PrepareSnapshotPreBarrier(id);
    sink.SnapshotState({id, 0});
    return context.Snapshot();
  }

  // The values a read_committed reader sees, sorted numerically.
  std::vector<int> Committed() {
    auto read = test::ReadTopic(bootstrap_, topic_);
    EXPECT_TRUE(read.ok()) << read.status();
    std::vector<int> values;
    if (!read.ok()) return values;
    for (const auto& m : *read) values.push_back(std::stoi(m.value));
    std::sort(values.begin(), values.end());
    return values;
  }

  static std::vector<int> Range(int first, int n) {
    std::vector<int> v;
    for (int i = first; i < first + n; ++i) v.push_back(i);
    return v;
  }

  // Whether every partition's last stable offset is at its high watermark.
  bool NoTransactionOpen() {
    return testing::WaitFor([&] {
      auto stable = test::EndOffsets(bootstrap_, topic_, true);
      auto high = test::EndOffsets(bootstrap_, topic_, false);
      return stable.ok() && high.ok() && *stable == *high;
    }, absl::Seconds(30), absl::Milliseconds(200));
  }

  std::string bootstrap_, topic_, prefix_;
};

// Checkpoint 1 completes but the task dies before its notification: the
// transaction stays pre-committed. The restored sink commits it from the
// checkpoint's state — also when that happens twice (idempotent).
TEST_F(TransactionalSinkTest, CrashAfterCheckpointCompletedBeforeCommitIsCommittedOnRestore) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 500);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  Write(*sink, 500, 300);  // after the barrier: belongs to the next checkpoint
  sink->Close();
  EXPECT_TRUE(Committed().empty());

  for (int restore = 0; restore < 2; ++restore) {
    RestoringContext again(checkpoint1);
    auto restored = Start(again);
    EXPECT_EQ(Committed(), Range(0, 500)) << "restore " << restore;
    restored->Close();
  }
  EXPECT_TRUE(NoTransactionOpen());
}

// Checkpoint 2's barrier pre-committed a transaction but checkpoint 2 never
// completed: restoring checkpoint 1 aborts it, and its records would be
// replayed by the sources.
TEST_F(TransactionalSinkTest, TransactionOfAnIncompleteCheckpointIsAbortedOnRestore) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 200);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  sink->NotifyCheckpointComplete(1);
  Write(*sink, 200, 200);
  Checkpoint(*sink, first, 2);  // pre-commits; never completes
  sink->Close();

  RestoringContext again(checkpoint1);
  auto restored = Start(again);
  EXPECT_TRUE(NoTransactionOpen());
  EXPECT_EQ(Committed(), Range(0, 200));
  restored->Close();
}

// Scaled down from 2 to 1 after a crash between a checkpoint's completion
// and its commit: the remaining subtask commits both old subtasks'
// transactions. Then it fails again before any new checkpoint completes, and
// the same checkpoint is restored a second time: committing the removed
// subtask's transaction again must still succeed (its id must not have been
// re-initialized, which bumps the epoch and fences the recovery commit).
TEST_F(TransactionalSinkTest, ScaleDownRestoreCanBeRepeatedBeforeTheNextCheckpoint) {
  std::vector<OperatorStateSnapshot> checkpoint1;
  for (int subtask = 0; subtask < 2; ++subtask) {
    RestoringContext context({}, subtask, 2);
    auto sink = Start(context);
    Write(*sink, subtask * 1000, 300);
    checkpoint1.push_back(Checkpoint(*sink, context, 1));
    sink->Close();
  }
  EXPECT_TRUE(Committed().empty());
  std::vector<int> expected = Range(0, 300);
  for (int v : Range(1000, 300)) expected.push_back(v);

  const std::vector<OperatorStateSnapshot> scaled = taskmanager::RedistributeOperatorState(checkpoint1, 1);
  ASSERT_EQ(scaled.size(), 1u);
  for (int restore = 0; restore < 2; ++restore) {
    RestoringContext again(scaled[0], 0, 1);
    std::unique_ptr<KafkaTransactionalSink> restored;
    ASSERT_NO_THROW(restored = Start(again)) << "restore " << restore;
    EXPECT_EQ(Committed(), expected) << "restore " << restore;
    restored->Close();
  }
  EXPECT_TRUE(NoTransactionOpen());
}

// Checkpoints that do not complete keep transactions pending: the pool
// grows rather than letting a checkpoint pass records no transaction of it
// covers. A restore from a checkpoint taken before the growth still aborts
// what the grown ids left open (it probes past the pool it knows).
TEST_F(TransactionalSinkTest, PoolGrowsWhileCheckpointsFailAndRestoreAbortsTheGrownIds) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 10);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  sink->NotifyCheckpointComplete(1);
  int next = 10;
  for (int64_t id = 2; id <= kTransactionPoolSize + 3; ++id) {  // none of these completes
    Write(*sink, next, 10);
    next += 10;
    Checkpoint(*sink, first, id);
  }
  Write(*sink, next, 10);  // open on a grown id
  sink->Close();

  RestoringContext again(checkpoint1);
  auto restored = Start(again);
  EXPECT_TRUE(NoTransactionOpen());
  EXPECT_EQ(Committed(), Range(0, 10));
  restored->Close();
}

// The pool grows only so far beyond what a restore would know: past that
// the task fails, saying that checkpoints are not completing.
TEST_F(TransactionalSinkTest, PoolGrowthIsBoundedAndTheFailureSaysWhy) {
  RestoringContext first({});
  auto sink = Start(first);
  std::string error;
  try {
    for (int64_t id = 1; id <= kTransactionPoolSize + kTransactionPoolGrowth + 1; ++id) {
      Write(*sink, static_cast<int>(id) * 10, 10);
      Checkpoint(*sink, first, id);
    }
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, ::testing::HasSubstr("checkpoints are not completing"));
  sink->Close();
}

// A committable whose transaction the broker no longer has open (here: an
// epoch it never gave out) cannot be committed: the sink fails loudly with
// the id and the checkpoint, never skips it.
TEST_F(TransactionalSinkTest, ACommitThatCannotHappenIsReportedAsDataLoss) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 10);
  OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  sink->Close();
  auto& entries = checkpoint1.at("kafka-sink-transactions").entries;
  ASSERT_EQ(entries.size(), 1u);
  absl::StatusOr<Committable> c = Committable::Decode(entries[0]);
  ASSERT_TRUE(c.ok());
  c->producer_epoch = static_cast<int16_t>(c->producer_epoch + 7);
  entries[0] = c->Encode();

  RestoringContext again(checkpoint1);
  std::string error;
  try {
    Start(again);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, ::testing::HasSubstr("DATA LOSS"));
  EXPECT_THAT(error, ::testing::HasSubstr(c->transactional_id));
  EXPECT_THAT(error, ::testing::HasSubstr("checkpoint 1"));
  EXPECT_THAT(error, ::testing::HasSubstr("transaction.timeout.ms"));
}

// Running normally: a transaction is committed when its checkpoint
// completes, not before; an interval without records commits nothing.
TEST_F(TransactionalSinkTest, CommitsWhenTheCheckpointCompletes) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 100);
  Checkpoint(*sink, first, 1);
  EXPECT_TRUE(Committed().empty());
  sink->NotifyCheckpointComplete(1);  // commits on the committer thread
  std::vector<int> committed;
  EXPECT_TRUE(testing::WaitFor([&] {
    committed = Committed();
    return committed.size() == 100;
  }, absl::Seconds(30), absl::Milliseconds(100)));
  EXPECT_EQ(committed, Range(0, 100));
  Checkpoint(*sink, first, 2);  // no records since checkpoint 1
  sink->NotifyCheckpointComplete(2);
  EXPECT_EQ(sink->committed_transactions(), 1);
  EXPECT_EQ(sink->delivered(), 100);
  sink->Close();
  EXPECT_TRUE(NoTransactionOpen());
}

}  // namespace
}  // namespace weir::connectors
