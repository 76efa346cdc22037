// KafkaTransactionalSink against the real broker, driven through its
// operator hooks in-process: each test stops a sink at one point of the
// two-phase commit (the sink is closed there, as a cancelled or failed task
// is; pre-committed transactions stay open, as after a crash), restores a new
// sink from the operator state of a chosen checkpoint, and checks what a
// read_committed reader sees and that no transaction is left open.
#include <librdkafka/rdkafkacpp.h>

#include <map>
#include <set>
#include <tuple>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/kafka/protocol/transaction_client.h"
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
using ::testing::HasSubstr;
using ::testing::Not;

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

  // A started sink (InitializeState, Open) restored from `state`, with
  // extra librdkafka producer `properties`.
  std::unique_ptr<KafkaTransactionalSink> Start(RestoringContext& context,
                                                std::map<std::string, std::string> properties = {}) {
    JobGraph graph;
    StreamEnvironment env(&graph);
    kafka::Sink(kafka::Source(env, {.brokers = "unused:9092", .topics = {"unused"}}),
                {.brokers = bootstrap_,
                 .topic = topic_,
                 .guarantee = kafka::Guarantee::kExactlyOnce,
                 .transactional_id_prefix = prefix_,
                 .properties = std::move(properties)});
    Properties vertex = graph.vertices.at(1).properties;
    auto created = KafkaSinkConnector().CreateSink(vertex);
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
  bool NoTransactionOpen(absl::Duration timeout = absl::Seconds(30)) {
    return testing::WaitFor([&] {
      auto stable = test::EndOffsets(bootstrap_, topic_, true);
      auto high = test::EndOffsets(bootstrap_, topic_, false);
      return stable.ok() && high.ok() && *stable == *high;
    }, timeout, absl::Milliseconds(200));
  }

  // Completes checkpoint `id` and waits until the sink confirmed `commits`
  // commits in all (the committer thread commits; the task thread learns it
  // at its next call).
  void CompleteAndWait(KafkaTransactionalSink& sink, int64_t id, int64_t commits) {
    sink.NotifyCheckpointComplete(id);
    EXPECT_TRUE(testing::WaitFor([&] {
      sink.NotifyCheckpointComplete(id);
      return sink.committed_transactions() >= commits;
    }, absl::Seconds(30), absl::Milliseconds(20)));
  }

  // The transaction coordinator's view of `id`.
  kafka_protocol::TransactionDescription Describe(const std::string& id) {
    absl::StatusOr<kafka_protocol::TransactionClient> client = kafka_protocol::TransactionClient::Create(bootstrap_);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return {};
    absl::StatusOr<kafka_protocol::TransactionDescription> d = client->DescribeTransaction(id);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.value_or(kafka_protocol::TransactionDescription{});
  }

  // The newest outcome marker committed on `id` (nullopt: none).
  std::optional<int64_t> NewestMarker(const std::string& id) {
    absl::StatusOr<kafka_protocol::TransactionClient> client = kafka_protocol::TransactionClient::Create(bootstrap_);
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return std::nullopt;
    auto fetched = client->FetchCommittedOffset(id, topic_, 0);
    EXPECT_TRUE(fetched.ok()) << fetched.status();
    if (!fetched.ok() || !fetched->has_value()) return std::nullopt;
    return (*fetched)->offset;
  }

  static std::vector<Committable> Committables(const OperatorStateSnapshot& state) {
    std::vector<Committable> out;
    auto it = state.find("kafka-sink-transactions");
    if (it == state.end()) return out;
    for (const std::string& entry : it->second.entries) {
      absl::StatusOr<Committable> c = Committable::Decode(entry);
      EXPECT_TRUE(c.ok()) << c.status();
      if (c.ok()) out.push_back(*c);
    }
    return out;
  }

  std::string bootstrap_, topic_, prefix_;
};

// Rule 1 of the sink: ids are used again (the pool rotates), but never two
// transactions with records in one producer session, so (id, producer id,
// epoch) names one transaction across all checkpoints.
// With no broker to reach, the exactly-once sink says so as the other Kafka
// clients do, not with librdkafka's "retry call to resume".
TEST_F(TransactionalSinkTest, UnreachableBrokersFailOpenSayingSo) {
  bootstrap_ = absl::StrCat("127.0.0.1:", weir::testing::FreePort());
  RestoringContext context({});
  std::string error;
  try {
    Start(context, {{"socket.timeout.ms", "2000"}});
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr(absl::StrCat("cannot reach Kafka brokers at ", bootstrap_, " within 2 s")));
  EXPECT_THAT(error, HasSubstr("check that the brokers are up"));
  EXPECT_THAT(error, Not(HasSubstr("retry call to resume")));
}

TEST_F(TransactionalSinkTest, EveryTransactionHasItsOwnProducerEpoch) {
  RestoringContext first({});
  auto sink = Start(first);
  std::map<int64_t, Committable> by_checkpoint;
  constexpr int kCheckpoints = 10;
  for (int64_t id = 1; id <= kCheckpoints; ++id) {
    Write(*sink, static_cast<int>(id) * 100, 20);
    for (const Committable& c : Committables(Checkpoint(*sink, first, id))) by_checkpoint.emplace(c.checkpoint_id, c);
    CompleteAndWait(*sink, id, id);
  }
  sink->Close();
  ASSERT_EQ(by_checkpoint.size(), static_cast<size_t>(kCheckpoints));
  std::set<std::tuple<std::string, int64_t, int16_t>> sessions;
  std::set<std::string> ids;
  for (const auto& [checkpoint, c] : by_checkpoint) {
    EXPECT_TRUE(sessions.emplace(c.transactional_id, c.producer_id, c.producer_epoch).second)
        << "checkpoint " << checkpoint << " shares id '" << c.transactional_id << "', producer id " << c.producer_id
        << ", epoch " << c.producer_epoch << " with an earlier transaction";
    ids.insert(c.transactional_id);
  }
  EXPECT_LT(ids.size(), by_checkpoint.size()) << "the pool never used an id again; the test shows nothing";
  EXPECT_EQ(Committed().size(), static_cast<size_t>(kCheckpoints * 20));
}

// A savepoint restored after the job went on, inside one sink: checkpoint 1 completes and is
// committed, the job goes on (checkpoints 2 and 3 complete, so checkpoint
// 1's id is free again), checkpoint 4 is pre-committed and never committed,
// and the sink stops. Restoring checkpoint 1 commits checkpoint 1's
// transaction by its producer id and epoch: it must find it committed, and
// must not commit checkpoint 4's records, which a later transaction on the
// same id may hold.
TEST_F(TransactionalSinkTest, AnOlderCheckpointsCommitNeverCommitsALaterTransaction) {
  RestoringContext first({});
  auto sink = Start(first);
  OperatorStateSnapshot checkpoint1;
  for (int64_t id = 1; id <= 3; ++id) {
    Write(*sink, static_cast<int>(id - 1) * 100, 100);
    OperatorStateSnapshot state = Checkpoint(*sink, first, id);
    if (id == 1) checkpoint1 = state;
    CompleteAndWait(*sink, id, id);
  }
  Write(*sink, 300, 100);
  const std::vector<Committable> pending = Committables(Checkpoint(*sink, first, 4));
  ASSERT_EQ(pending.size(), 1u);
  sink->Close();
  ASSERT_EQ(Committed(), Range(0, 300));

  RestoringContext again(checkpoint1);
  std::unique_ptr<KafkaTransactionalSink> restored;
  ASSERT_NO_THROW(restored = Start(again));
  EXPECT_TRUE(NoTransactionOpen());
  EXPECT_EQ(Committed(), Range(0, 300)) << "checkpoint 4's transaction (on '" << pending[0].transactional_id
                                        << "') was committed by checkpoint 1's recovery";
  restored->Close();
}

// Checkpoint 2 is pre-committed and never completes; checkpoint 1 is
// restored, which aborts checkpoint 2's transaction. Restoring checkpoint 2
// afterwards (as if it had completed: a retained checkpoint of a branch)
// finds that transaction resolved by a later run and goes on; it is no
// data loss the job should fail for.
TEST_F(TransactionalSinkTest, ATransactionResolvedByALaterRunIsSkipped) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 100);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  CompleteAndWait(*sink, 1, 1);
  Write(*sink, 100, 100);
  const OperatorStateSnapshot checkpoint2 = Checkpoint(*sink, first, 2);
  sink->Close();

  RestoringContext branch(checkpoint1);
  auto branched = Start(branch);
  branched->Close();
  EXPECT_TRUE(NoTransactionOpen());

  RestoringContext back(checkpoint2);
  std::unique_ptr<KafkaTransactionalSink> restored;
  ASSERT_NO_THROW(restored = Start(back));
  EXPECT_EQ(Committed(), Range(0, 100));
  restored->Close();
  EXPECT_TRUE(NoTransactionOpen());
}

// A later run at a higher parallelism pre-committed transactions on ids a
// restore of an older checkpoint at parallelism 1 neither lists nor uses:
// the restore finds them (DescribeTransactions, walking the ids the broker
// knows) and aborts them, so read_committed readers are not held back
// until the broker's timeout.
TEST_F(TransactionalSinkTest, TransactionsALaterRunLeftOpenOnOtherIdsAreAborted) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 50);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  CompleteAndWait(*sink, 1, 1);
  sink->Close();
  for (int subtask = 0; subtask < 3; ++subtask) {
    RestoringContext later({}, subtask, 3);
    auto run = Start(later);
    Write(*run, 1000 + subtask * 100, 50);
    Checkpoint(*run, later, 2);  // pre-committed; checkpoint 2 never completes
    run->Close();
  }
  EXPECT_EQ(Committed(), Range(0, 50));

  RestoringContext again(checkpoint1);
  auto restored = Start(again);
  EXPECT_TRUE(NoTransactionOpen());
  EXPECT_EQ(Committed(), Range(0, 50));
  restored->Close();
}

// What markers must not hide: a pre-committed transaction that the broker
// aborts on its timeout while the job is down is data loss, and the sink
// still says so.
TEST_F(TransactionalSinkTest, ATransactionTheBrokerAbortedOnTimeoutIsStillDataLoss) {
  const std::map<std::string, std::string> short_timeout = {{"transaction.timeout.ms", "3000"}};
  RestoringContext first({});
  auto sink = Start(first, short_timeout);
  Write(*sink, 0, 50);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  sink->Close();
  // The broker's scan for timed-out transactions runs every 10 s.
  ASSERT_TRUE(NoTransactionOpen(absl::Seconds(60)));

  RestoringContext again(checkpoint1);
  std::string error;
  try {
    Start(again, short_timeout);
  } catch (const std::runtime_error& e) {
    error = e.what();
  }
  EXPECT_THAT(error, ::testing::HasSubstr("DATA LOSS"));
  EXPECT_THAT(error, ::testing::HasSubstr("checkpoint 1"));
  EXPECT_TRUE(Committed().empty());
}

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
// transactions and initializes the removed subtask's ids. Then it fails
// again before any new checkpoint completes, and the same checkpoint is
// restored a second time: the removed subtask's transaction is found
// resolved by its marker, not taken for data loss.
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

// A start owes an init marker only where its initialization may abort a
// transaction some checkpoint lists. A first start finds no id: it creates
// its pool's ids without a marker, and leaves the ids past the pool (which
// it only initializes to abort what is open on them) unknown to the broker.
TEST_F(TransactionalSinkTest, AFirstStartWritesNoInitMarkerAndCreatesNoIdItDoesNotUse) {
  RestoringContext first({});
  auto sink = Start(first);
  for (int k = 0; k < kTransactionPoolSize; ++k) {
    const std::string id = TransactionalId(prefix_, 0, k);
    const kafka_protocol::TransactionDescription d = Describe(id);
    EXPECT_TRUE(d.found) << id;
    EXPECT_EQ(d.state, "Empty") << id;
    EXPECT_EQ(d.producer_epoch, 0) << id;
    EXPECT_EQ(NewestMarker(id), std::nullopt) << id << " has an init marker";
  }
  for (int k = kTransactionPoolSize; k < kTransactionPoolSize + kTransactionPoolGrowth; ++k) {
    EXPECT_FALSE(Describe(TransactionalId(prefix_, 0, k)).found) << "the start created id " << k;
  }
  Write(*sink, 0, 50);
  Checkpoint(*sink, first, 1);
  CompleteAndWait(*sink, 1, 1);
  sink->Close();
  EXPECT_EQ(Committed(), Range(0, 50));
  EXPECT_TRUE(NoTransactionOpen());
}

// An id released after its commit (a new producer, nothing since) is
// initialized at the next start without a marker, so its newest marker stays
// its committed transaction's own: restoring the checkpoint that lists that
// transaction afterwards finds it committed, not "resolved by a later run".
TEST_F(TransactionalSinkTest, AReleasedIdKeepsItsDataMarkerAcrossAStart) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 50);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);
  const std::vector<Committable> listed = Committables(checkpoint1);
  ASSERT_EQ(listed.size(), 1u);
  const Committable& t1 = listed[0];
  CompleteAndWait(*sink, 1, 1);
  Write(*sink, 50, 50);
  const OperatorStateSnapshot checkpoint2 = Checkpoint(*sink, first, 2);  // omits t1: releases its id
  CompleteAndWait(*sink, 2, 2);
  // The preparer thread gives t1's id a new producer: one epoch on, "Empty".
  EXPECT_TRUE(testing::WaitFor([&] {
    sink->NotifyCheckpointComplete(2);
    const kafka_protocol::TransactionDescription d = Describe(t1.transactional_id);
    return d.state == "Empty" && d.producer_epoch == t1.producer_epoch + 1;
  }, absl::Seconds(30), absl::Milliseconds(50)));
  sink->Close();
  const int64_t t1_marker = MarkerOffset(t1.producer_id, t1.producer_epoch, MarkerKind::kData).value();
  ASSERT_EQ(NewestMarker(t1.transactional_id), t1_marker);

  RestoringContext restart(checkpoint2);
  auto restarted = Start(restart);
  EXPECT_EQ(Describe(t1.transactional_id).producer_epoch, t1.producer_epoch + 2);
  EXPECT_EQ(NewestMarker(t1.transactional_id), t1_marker) << "the start wrote an init marker on a released id";
  restarted->Close();

  RestoringContext back(checkpoint1);
  std::unique_ptr<KafkaTransactionalSink> restored;
  ASSERT_NO_THROW(restored = Start(back));
  EXPECT_THAT(back.MetricsText(), ::testing::HasSubstr(absl::StrCat("topic=\"", topic_, "\",outcome=\"committed\"} 1")));
  restored->Close();
  EXPECT_EQ(Committed(), Range(0, 100));
  EXPECT_TRUE(NoTransactionOpen());
}

// An initialization that fenced a pre-committed transaction and died before
// its init marker (here: a plain producer that only initializes the id)
// leaves the id "Empty" with no marker newer than that transaction. The
// next start writes the marker it owes, so that restoring the checkpoint
// that lists the transaction finds it resolved by a later run instead of
// failing the job for data loss.
TEST_F(TransactionalSinkTest, AFenceWithoutItsInitMarkerGetsOneAtTheNextStart) {
  RestoringContext first({});
  auto sink = Start(first);
  Write(*sink, 0, 50);
  const OperatorStateSnapshot checkpoint1 = Checkpoint(*sink, first, 1);  // never completes
  const std::vector<Committable> listed = Committables(checkpoint1);
  ASSERT_EQ(listed.size(), 1u);
  const Committable& t1 = listed[0];
  sink->Close();
  {
    std::string error;
    std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    ASSERT_EQ(conf->set("bootstrap.servers", bootstrap_, error), RdKafka::Conf::CONF_OK) << error;
    ASSERT_EQ(conf->set("transactional.id", t1.transactional_id, error), RdKafka::Conf::CONF_OK) << error;
    std::unique_ptr<RdKafka::Producer> fencer(RdKafka::Producer::create(conf.get(), error));
    ASSERT_NE(fencer, nullptr) << error;
    std::unique_ptr<RdKafka::Error> init(fencer->init_transactions(30000));
    ASSERT_EQ(init, nullptr) << init->str();
  }
  const kafka_protocol::TransactionDescription fenced = Describe(t1.transactional_id);
  ASSERT_EQ(fenced.state, "Empty");
  ASSERT_EQ(NewestMarker(t1.transactional_id), std::nullopt);

  RestoringContext fresh({});
  auto other = Start(fresh);
  const std::optional<int64_t> marker = NewestMarker(t1.transactional_id);
  ASSERT_TRUE(marker.has_value()) << "no init marker on the id whose fence had none";
  EXPECT_GT(*marker, MarkerOffset(t1.producer_id, t1.producer_epoch, MarkerKind::kData).value());
  other->Close();

  RestoringContext back(checkpoint1);
  std::unique_ptr<KafkaTransactionalSink> restored;
  ASSERT_NO_THROW(restored = Start(back));
  restored->Close();
  EXPECT_TRUE(Committed().empty());
  EXPECT_TRUE(NoTransactionOpen());
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
