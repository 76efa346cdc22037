// TransactionClient against the real test broker: it finishes transactions
// that a transactional librdkafka producer opened, wrote to and flushed
// before it died (a forked child that _exits without committing, as after a
// crash between pre-commit and commit), and it reports what a caller must
// tell apart: committed (also again), aborted before (data loss), timed out
// by the broker (data loss), no broker, and configurations it cannot serve.
// And its two read-only calls against what a live transactional producer
// does: the group offset a transaction carries (send_offsets_to_transaction)
// shows in FetchCommittedOffset only once the transaction committed, and
// DescribeTransaction follows the transaction through Ongoing,
// CompleteCommit and CompleteAbort.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "connectors/kafka/protocol/kafka_errors.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/process.h"

namespace weir::connectors::kafka_protocol {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Optional;
using ::weir::test::CreateTopic;
using ::weir::test::ReadTopic;
using ::weir::test::TestKafkaBootstrap;
using ::weir::test::UniqueTopicName;

constexpr int kRecords = 500;
constexpr int kTimeoutMs = 30000;
// How long a check may wait for the broker to write transaction markers.
constexpr absl::Duration kMarkerWait = absl::Seconds(20);
// librdkafka's default transaction.timeout.ms, far longer than any test.
constexpr int kLongTransactionTimeoutMs = 60000;

// What the crashed producer left behind.
struct PendingTransaction {
  std::string transactional_id;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
};

std::unique_ptr<RdKafka::Conf> MakeConf(const std::map<std::string, std::string>& settings,
                                        std::string* error) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  for (const auto& [name, value] : settings) {
    if (conf->set(name, value, *error) != RdKafka::Conf::CONF_OK) {
      *error = absl::StrCat(name, "=", value, ": ", *error);
      return nullptr;
    }
  }
  return conf;
}

// Keeps the newest statistics JSON (served by poll and flush).
class StatsCapture : public RdKafka::EventCb {
 public:
  void event_cb(RdKafka::Event& event) override {
    if (event.type() == RdKafka::Event::EVENT_STATS) latest = event.str();
  }
  std::string latest;
};

// Polls `producer` until the statistics `stats` captures carry an `eos`
// object with a producer id and epoch, for at most 10 s; returns that object,
// or nullopt.
std::optional<nlohmann::json> EosStatistics(RdKafka::Producer& producer, StatsCapture& stats) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    producer.poll(100);
    if (stats.latest.empty()) continue;
    const nlohmann::json json = nlohmann::json::parse(stats.latest, nullptr, false);
    if (json.is_discarded() || !json.contains("eos")) continue;
    const nlohmann::json& eos = json["eos"];
    if (eos.value("producer_id", int64_t{-1}) >= 0 && eos.value("producer_epoch", int64_t{-1}) >= 0) return eos;
  }
  return std::nullopt;
}

// The child's work: open a transaction, write and flush `records` records,
// read the producer id and epoch from the statistics (the `eos` object).
// Returns "<producer id> <epoch>" or "error: ...". Runs in the forked child,
// so it reports instead of asserting.
std::string OpenTransactionAndReport(const std::string& bootstrap, const std::string& topic,
                                     const std::string& transactional_id, int records,
                                     int transaction_timeout_ms) {
  std::string error;
  weir::test::DeliveryCounter delivered;
  StatsCapture stats;
  std::unique_ptr<RdKafka::Conf> conf = MakeConf(
      {{"bootstrap.servers", bootstrap},
       {"transactional.id", transactional_id},
       {"transaction.timeout.ms", absl::StrCat(transaction_timeout_ms)},
       {"statistics.interval.ms", "100"},
       {"linger.ms", "5"}},
      &error);
  if (conf == nullptr) return absl::StrCat("error: ", error);
  if (conf->set("dr_cb", &delivered, error) != RdKafka::Conf::CONF_OK ||
      conf->set("event_cb", &stats, error) != RdKafka::Conf::CONF_OK) {
    return absl::StrCat("error: ", error);
  }
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), error));
  if (producer == nullptr) return absl::StrCat("error: creating the producer: ", error);
  std::unique_ptr<RdKafka::Error> txn_error(producer->init_transactions(kTimeoutMs));
  if (txn_error) return absl::StrCat("error: init_transactions: ", txn_error->str());
  txn_error.reset(producer->begin_transaction());
  if (txn_error) return absl::StrCat("error: begin_transaction: ", txn_error->str());
  for (int i = 0; i < records; ++i) {
    std::string value = absl::StrCat("record-", i);
    RdKafka::ErrorCode code = RdKafka::ERR_NO_ERROR;
    while ((code = producer->produce(topic, 0, RdKafka::Producer::RK_MSG_COPY, value.data(),
                                     value.size(), nullptr, 0, 0, nullptr)) ==
           RdKafka::ERR__QUEUE_FULL) {
      producer->poll(50);
    }
    if (code != RdKafka::ERR_NO_ERROR) {
      return absl::StrCat("error: produce: ", RdKafka::err2str(code));
    }
  }
  if (producer->flush(kTimeoutMs) != RdKafka::ERR_NO_ERROR || producer->outq_len() > 0) {
    return "error: flush did not finish";
  }
  if (delivered.delivered != records || delivered.failed != 0) {
    return absl::StrCat("error: ", delivered.delivered, " records delivered, ", delivered.failed,
                        " failed: ", delivered.last_error);
  }
  // Statistics from before the flush are as good (the id and epoch come from
  // init_transactions), but wait for a fresh set to be sure the state is the
  // open transaction's.
  stats.latest.clear();
  const std::optional<nlohmann::json> eos = EosStatistics(*producer, stats);
  if (!eos) return "error: no statistics with the producer id and epoch within 10 s";
  return absl::StrCat(eos->value("producer_id", int64_t{-1}), " ", eos->value("producer_epoch", int64_t{-1}), " ",
                      eos->value("txn_state", std::string()));
}

// Forks a child that opens a transaction on `transactional_id`, writes
// kRecords records to partition 0 of `topic`, flushes them, reports its
// producer id and epoch through a pipe and _exits without committing: a
// producer that crashed after its pre-commit. Call with no librdkafka client
// alive in this process (fork copies only the calling thread).
absl::StatusOr<PendingTransaction> WriteAndCrash(const std::string& bootstrap,
                                                 const std::string& topic,
                                                 const std::string& transactional_id,
                                                 int transaction_timeout_ms) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", errno));
  const pid_t child = fork();
  if (child < 0) return absl::InternalError(absl::StrCat("fork: ", errno));
  if (child == 0) {
    close(fds[0]);
    const std::string report = OpenTransactionAndReport(bootstrap, topic, transactional_id,
                                                        kRecords, transaction_timeout_ms);
    size_t written = 0;
    while (written < report.size()) {
      const ssize_t n = write(fds[1], report.data() + written, report.size() - written);
      if (n <= 0) break;
      written += static_cast<size_t>(n);
    }
    // The crash: no commit, no destructors, librdkafka's threads just stop.
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  bool eof = false;
  while (!eof && absl::Now() < deadline) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    char buffer[256];
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n > 0) {
      report.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      eof = true;
    }
  }
  close(fds[0]);
  if (!eof) kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  if (!eof) return absl::DeadlineExceededError("the producer child did not report within 60 s");

  const std::vector<std::string> fields = absl::StrSplit(report, ' ');
  PendingTransaction pending{transactional_id};
  int epoch = -1;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[0], &pending.producer_id) ||
      !absl::SimpleAtoi(fields[1], &epoch)) {
    return absl::InternalError(absl::StrCat("producer child: ", report));
  }
  pending.producer_epoch = static_cast<int16_t>(epoch);
  return pending;
}

// The end offset of partition 0 of `topic` as a consumer with
// `isolation_level` sees it: the high watermark for read_uncommitted, the
// last stable offset (before the first open transaction) for read_committed.
absl::StatusOr<int64_t> EndOffset(const std::string& bootstrap, const std::string& topic,
                                  const std::string& isolation_level) {
  std::string error;
  std::unique_ptr<RdKafka::Conf> conf = MakeConf({{"bootstrap.servers", bootstrap},
                                                  {"group.id", "weir-test-txn-offsets"},
                                                  {"isolation.level", isolation_level}},
                                                 &error);
  if (conf == nullptr) return absl::InternalError(error);
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(
      RdKafka::KafkaConsumer::create(conf.get(), error));
  if (consumer == nullptr) return absl::InternalError(absl::StrCat("consumer: ", error));
  int64_t low = 0;
  int64_t high = 0;
  const RdKafka::ErrorCode code = consumer->query_watermark_offsets(topic, 0, &low, &high, 10000);
  consumer->close();
  if (code != RdKafka::ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("query_watermark_offsets: ", RdKafka::err2str(code)));
  }
  return high;
}

// Whether no transaction holds partition 0 of `topic` open any more: the
// last stable offset has reached the high watermark (the commit or abort
// marker is written).
bool TransactionsSettled(const std::string& bootstrap, const std::string& topic) {
  const absl::StatusOr<int64_t> stable = EndOffset(bootstrap, topic, "read_committed");
  const absl::StatusOr<int64_t> high = EndOffset(bootstrap, topic, "read_uncommitted");
  return stable.ok() && high.ok() && *stable == *high;
}

class TransactionClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
    topic_ = UniqueTopicName("weir-txn-client");
    ASSERT_TRUE(CreateTopic(bootstrap_, topic_, 1).ok());
  }

  TransactionClient MakeClient(absl::Duration deadline = absl::Seconds(30)) {
    TransactionClientOptions options;
    options.deadline = deadline;
    options.logger = spdlog::default_logger();
    absl::StatusOr<TransactionClient> client = TransactionClient::Create(bootstrap_, options);
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  // A transaction of kRecords records, flushed and left open by a crashed
  // producer; checks that read_committed consumers do not see it yet.
  PendingTransaction CrashedTransaction(int transaction_timeout_ms = kLongTransactionTimeoutMs) {
    absl::StatusOr<PendingTransaction> pending = WriteAndCrash(
        bootstrap_, topic_, UniqueTopicName("weir-txn-client-id"), transaction_timeout_ms);
    EXPECT_TRUE(pending.ok()) << pending.status();
    if (!pending.ok()) return {};
    const absl::StatusOr<int64_t> high = EndOffset(bootstrap_, topic_, "read_uncommitted");
    EXPECT_TRUE(high.ok() && *high == kRecords) << "the records are in the log: " << high.status()
                                               << " " << high.value_or(-1);
    const absl::StatusOr<int64_t> stable = EndOffset(bootstrap_, topic_, "read_committed");
    EXPECT_TRUE(stable.ok() && *stable == 0)
        << "the open transaction holds read_committed consumers back: " << stable.status() << " "
        << stable.value_or(-1);
    absl::StatusOr<std::vector<weir::test::KafkaMessage>> visible = ReadTopic(bootstrap_, topic_);
    EXPECT_TRUE(visible.ok()) << visible.status();
    if (visible.ok()) {
      EXPECT_TRUE(visible->empty()) << visible->size() << " records visible";
    }
    return *pending;
  }

  // The records a read_committed consumer sees, once the last transaction
  // marker is written.
  std::vector<weir::test::KafkaMessage> CommittedRecords() {
    EXPECT_TRUE(weir::testing::WaitFor([&] { return TransactionsSettled(bootstrap_, topic_); },
                                       kMarkerWait))
        << "no transaction marker within " << kMarkerWait;
    absl::StatusOr<std::vector<weir::test::KafkaMessage>> records = ReadTopic(bootstrap_, topic_);
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *std::move(records) : std::vector<weir::test::KafkaMessage>{};
  }

  std::string bootstrap_;
  std::string topic_;
};

TEST_F(TransactionClientTest, CommitsTheTransactionOfACrashedProducerOnceAndForAll) {
  const PendingTransaction txn = CrashedTransaction();
  ASSERT_GE(txn.producer_id, 0);
  const TransactionClient client = MakeClient();

  const absl::Status committed =
      client.CommitTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  ASSERT_TRUE(committed.ok()) << committed;
  const std::vector<weir::test::KafkaMessage> records = CommittedRecords();
  ASSERT_EQ(records.size(), static_cast<size_t>(kRecords));
  for (int i = 0; i < kRecords; ++i) {
    EXPECT_EQ(records[static_cast<size_t>(i)].value, absl::StrCat("record-", i));
  }

  // A recovery that runs twice (it crashed after the commit) commits again: OK.
  const absl::Status again =
      client.CommitTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  EXPECT_TRUE(again.ok()) << again;

  // An abort of the committed transaction is refused, and loses nothing.
  const absl::Status aborted =
      client.AbortTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  EXPECT_EQ(aborted.code(), absl::StatusCode::kFailedPrecondition) << aborted;
  EXPECT_THAT(KafkaErrorCodeOf(aborted), Optional(kInvalidTxnState));
  EXPECT_THAT(aborted.message(), HasSubstr("INVALID_TXN_STATE (48)"));
  EXPECT_THAT(aborted.message(), HasSubstr(txn.transactional_id));
  EXPECT_EQ(CommittedRecords().size(), static_cast<size_t>(kRecords));
}

TEST_F(TransactionClientTest, CommitAfterAnAbortIsReportedAsDataLoss) {
  const PendingTransaction txn = CrashedTransaction();
  ASSERT_GE(txn.producer_id, 0);
  const TransactionClient client = MakeClient();

  const absl::Status aborted =
      client.AbortTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  ASSERT_TRUE(aborted.ok()) << aborted;
  EXPECT_TRUE(CommittedRecords().empty());

  const absl::Status committed =
      client.CommitTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  EXPECT_EQ(committed.code(), absl::StatusCode::kDataLoss) << committed;
  EXPECT_THAT(KafkaErrorCodeOf(committed), Optional(kInvalidTxnState));
  EXPECT_THAT(committed.message(), HasSubstr("INVALID_TXN_STATE (48)"));
  EXPECT_THAT(committed.message(), HasSubstr("records are lost"));
  EXPECT_TRUE(CommittedRecords().empty());
}

TEST_F(TransactionClientTest, CommitAfterTheBrokerTimedTheTransactionOutIsDataLoss) {
  // The broker aborts a transaction older than its transaction.timeout.ms at
  // its next check (transaction.abort.timed.out.transaction.cleanup.interval.ms,
  // 10 s by default), and bumps the producer's epoch.
  const PendingTransaction txn = CrashedTransaction(/*transaction_timeout_ms=*/2000);
  ASSERT_GE(txn.producer_id, 0);
  ASSERT_TRUE(weir::testing::WaitFor([&] { return TransactionsSettled(bootstrap_, topic_); },
                                     absl::Seconds(30)))
      << "the broker did not abort the timed-out transaction within 30 s";
  const TransactionClient client = MakeClient();

  const absl::Status committed =
      client.CommitTransaction(txn.transactional_id, txn.producer_id, txn.producer_epoch);
  EXPECT_EQ(committed.code(), absl::StatusCode::kDataLoss) << committed;
  // PRODUCER_FENCED from EndTxn v2 on, INVALID_PRODUCER_EPOCH before.
  EXPECT_THAT(KafkaErrorCodeOf(committed), Optional(AnyOf(kProducerFenced, kInvalidProducerEpoch)));
  EXPECT_THAT(committed.message(), HasSubstr("aborted the transaction on timeout"));
  EXPECT_TRUE(CommittedRecords().empty());
}

TEST_F(TransactionClientTest, NoBrokerFailsClearlyWithinTheDeadline) {
  const int port = weir::testing::FreePort();
  TransactionClientOptions options;
  options.deadline = absl::Seconds(2);
  absl::StatusOr<TransactionClient> client =
      TransactionClient::Create(absl::StrCat("127.0.0.1:", port), options);
  ASSERT_TRUE(client.ok()) << client.status();

  const absl::Time start = absl::Now();
  const absl::Status status = client->CommitTransaction("weir-txn-nobody", 1, 0);
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("connecting to 127.0.0.1:", port)));
  EXPECT_THAT(status.message(), HasSubstr("Connection refused"));
  EXPECT_THAT(status.message(), HasSubstr("weir-txn-nobody"));
  EXPECT_EQ(KafkaErrorCodeOf(status), std::nullopt);
  EXPECT_LE(took, absl::Seconds(3)) << "took " << took;
}

// A transactional producer in this process whose transactions carry a
// consumer group's offset, as the exactly-once sink's outcome markers do.
class OffsetCarryingProducer {
 public:
  // Creates the producer and runs init_transactions; check ok().
  OffsetCarryingProducer(const std::string& bootstrap, const std::string& transactional_id) {
    std::string error;
    std::unique_ptr<RdKafka::Conf> conf =
        MakeConf({{"bootstrap.servers", bootstrap},
                  {"transactional.id", transactional_id},
                  {"statistics.interval.ms", "100"},
                  {"linger.ms", "5"}},
                 &error);
    if (conf == nullptr || conf->set("event_cb", &stats_, error) != RdKafka::Conf::CONF_OK) {
      ADD_FAILURE() << error;
      return;
    }
    producer_.reset(RdKafka::Producer::create(conf.get(), error));
    if (producer_ == nullptr) {
      ADD_FAILURE() << "creating the producer: " << error;
      return;
    }
    Check(producer_->init_transactions(kTimeoutMs), "init_transactions");
  }

  bool ok() const { return producer_ != nullptr && !failed_; }

  // The producer id and epoch, from the statistics' `eos` object.
  std::pair<int64_t, int16_t> IdAndEpoch() {
    const std::optional<nlohmann::json> eos = EosStatistics(*producer_, stats_);
    if (!eos) {
      ADD_FAILURE() << "no statistics with the producer id within 10 s";
      return {-1, -1};
    }
    return {eos->value("producer_id", int64_t{-1}), static_cast<int16_t>(eos->value("producer_epoch", int64_t{-1}))};
  }

  void Begin() { Check(producer_->begin_transaction(), "begin_transaction"); }

  // Writes `records` records to partition 0 of `topic` and flushes them.
  void Write(const std::string& topic, int records) {
    for (int i = 0; i < records; ++i) {
      const std::string value = absl::StrCat("record-", i);
      ASSERT_EQ(producer_->produce(topic, 0, RdKafka::Producer::RK_MSG_COPY,
                                   const_cast<char*>(value.data()), value.size(), nullptr, 0, 0,
                                   nullptr),
                RdKafka::ERR_NO_ERROR);
    }
    ASSERT_EQ(producer_->flush(kTimeoutMs), RdKafka::ERR_NO_ERROR);
  }

  // Adds `group`'s offset `offset` (with `metadata`) on partition 0 of
  // `topic` to the open transaction.
  void SendOffset(const std::string& group, const std::string& topic, int64_t offset,
                  const std::string& metadata) {
    rd_kafka_topic_partition_list_t* offsets = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_t* partition =
        rd_kafka_topic_partition_list_add(offsets, topic.c_str(), 0);
    partition->offset = offset;
    // The list frees it.
    partition->metadata = malloc(metadata.size());
    memcpy(partition->metadata, metadata.data(), metadata.size());
    partition->metadata_size = metadata.size();
    rd_kafka_consumer_group_metadata_t* group_metadata =
        rd_kafka_consumer_group_metadata_new(group.c_str());
    rd_kafka_error_t* error = rd_kafka_send_offsets_to_transaction(
        producer_->c_ptr(), offsets, group_metadata, kTimeoutMs);
    rd_kafka_consumer_group_metadata_destroy(group_metadata);
    rd_kafka_topic_partition_list_destroy(offsets);
    if (error != nullptr) {
      failed_ = true;
      ADD_FAILURE() << "send_offsets_to_transaction: " << rd_kafka_error_string(error);
      rd_kafka_error_destroy(error);
    }
  }

  void Commit() { Check(producer_->commit_transaction(kTimeoutMs), "commit_transaction"); }
  void Abort() { Check(producer_->abort_transaction(kTimeoutMs), "abort_transaction"); }

 private:
  void Check(RdKafka::Error* raw, absl::string_view what) {
    std::unique_ptr<RdKafka::Error> error(raw);
    if (error == nullptr) return;
    failed_ = true;
    ADD_FAILURE() << what << ": " << error->str();
  }

  StatsCapture stats_;
  std::unique_ptr<RdKafka::Producer> producer_;
  bool failed_ = false;
};

// The description of `id` once it is in a state other than `passing` (the
// Prepare* state the coordinator holds until it has written the markers).
TransactionDescription DescriptionAfter(const TransactionClient& client, const std::string& id,
                                        const std::string& passing) {
  absl::StatusOr<TransactionDescription> description;
  EXPECT_TRUE(weir::testing::WaitFor(
      [&] {
        description = client.DescribeTransaction(id);
        return !description.ok() || description->state != passing;
      },
      kMarkerWait))
      << "still " << passing << " after " << kMarkerWait;
  EXPECT_TRUE(description.ok()) << description.status();
  return description.value_or(TransactionDescription{});
}

TEST_F(TransactionClientTest, GroupOffsetAndTransactionStateFollowTheTransaction) {
  const std::string id = UniqueTopicName("weir-txn-client-marker");
  const std::string group = id;  // as the sink does: the group is named after the id
  const TransactionClient client = MakeClient();

  // Nothing yet: the id is unknown, the group has no offset.
  absl::StatusOr<TransactionDescription> description = client.DescribeTransaction(id);
  ASSERT_TRUE(description.ok()) << description.status();
  EXPECT_FALSE(description->found);
  absl::StatusOr<std::optional<CommittedOffset>> offset =
      client.FetchCommittedOffset(group, topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, std::nullopt);

  OffsetCarryingProducer producer(bootstrap_, id);
  ASSERT_TRUE(producer.ok());
  const auto [producer_id, epoch] = producer.IdAndEpoch();
  ASSERT_GE(producer_id, 0);
  description = client.DescribeTransaction(id);
  ASSERT_TRUE(description.ok()) << description.status();
  EXPECT_TRUE(description->found);
  EXPECT_EQ(description->state, "Empty");
  EXPECT_EQ(description->producer_id, producer_id);
  EXPECT_EQ(description->producer_epoch, epoch);

  // A transaction with records and the group's offset: open, the offset is
  // pending and does not show (nor block the fetch).
  constexpr int64_t kFirst = (int64_t{1234} << 17) | 3;
  const std::string metadata = "weir v1 data chk=1";
  producer.Begin();
  producer.Write(topic_, 10);
  producer.SendOffset(group, topic_, kFirst, metadata);
  ASSERT_TRUE(producer.ok());
  description = client.DescribeTransaction(id);
  ASSERT_TRUE(description.ok()) << description.status();
  EXPECT_EQ(description->state, "Ongoing");
  EXPECT_EQ(description->producer_id, producer_id);
  EXPECT_EQ(description->producer_epoch, epoch);
  EXPECT_GT(description->timeout_ms, 0);
  offset = client.FetchCommittedOffset(group, topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, std::nullopt) << "an open transaction's offset must not show";

  // Committed: the offset shows, with the metadata librdkafka sent along.
  producer.Commit();
  ASSERT_TRUE(producer.ok());
  description = DescriptionAfter(client, id, "PrepareCommit");
  EXPECT_EQ(description->state, "CompleteCommit");
  EXPECT_EQ(description->producer_id, producer_id);
  EXPECT_EQ(description->producer_epoch, epoch);
  offset = client.FetchCommittedOffset(group, topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  ASSERT_TRUE(offset->has_value()) << "the committed transaction's offset must show";
  EXPECT_EQ((*offset)->offset, kFirst);
  EXPECT_EQ((*offset)->metadata, metadata) << "librdkafka carries TxnOffsetCommit metadata";

  // Aborted: the offset it carried never shows.
  producer.Begin();
  producer.Write(topic_, 10);
  producer.SendOffset(group, topic_, kFirst + 2, "weir v1 data chk=2");
  producer.Abort();
  ASSERT_TRUE(producer.ok());
  description = DescriptionAfter(client, id, "PrepareAbort");
  EXPECT_EQ(description->state, "CompleteAbort");
  EXPECT_EQ(description->producer_id, producer_id);
  EXPECT_EQ(description->producer_epoch, epoch) << "a client's abort keeps the epoch (EndTxn v<5)";
  offset = client.FetchCommittedOffset(group, topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  ASSERT_TRUE(offset->has_value());
  EXPECT_EQ((*offset)->offset, kFirst);
  EXPECT_EQ((*offset)->metadata, metadata);

  // A transaction with nothing but the offset (the sink's init marker)
  // commits it too.
  producer.Begin();
  producer.SendOffset(group, topic_, kFirst + 4, "weir v1 init");
  producer.Commit();
  ASSERT_TRUE(producer.ok());
  EXPECT_EQ(DescriptionAfter(client, id, "PrepareCommit").state, "CompleteCommit");
  offset = client.FetchCommittedOffset(group, topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  ASSERT_TRUE(offset->has_value());
  EXPECT_EQ((*offset)->offset, kFirst + 4);
  EXPECT_EQ((*offset)->metadata, "weir v1 init");

  // Other partitions and groups stay without an offset.
  offset = client.FetchCommittedOffset(group, topic_, 1);
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, std::nullopt);
  offset = client.FetchCommittedOffset(absl::StrCat(group, "-other"), topic_, 0);
  ASSERT_TRUE(offset.ok()) << offset.status();
  EXPECT_EQ(*offset, std::nullopt);
  EXPECT_EQ(CommittedRecords().size(), 10u) << "only the first transaction's records";
}

TEST_F(TransactionClientTest, DescribingAnUnknownIdCreatesNothing) {
  const std::string id = UniqueTopicName("weir-txn-client-never-used");
  const TransactionClient client = MakeClient();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<TransactionDescription> description = client.DescribeTransaction(id);
    ASSERT_TRUE(description.ok()) << description.status();
    EXPECT_FALSE(description->found);
    EXPECT_EQ(description->producer_id, -1);
    EXPECT_EQ(description->state, "");
  }
  // An EndTxn on it still finds no producer: describing did not create the id.
  const absl::Status committed = client.CommitTransaction(id, 1, 0);
  EXPECT_THAT(KafkaErrorCodeOf(committed),
              Optional(AnyOf(kInvalidProducerIdMapping, kTransactionalIdNotFound)))
      << committed;
}

TEST(TransactionRecoveryConfigTest, RefusesTlsAndSasl) {
  for (const char* protocol : {"ssl", "SSL", "sasl_plaintext", "sasl_ssl", "SASL_SSL"}) {
    const absl::Status status =
        CheckTransactionRecoverySupported({{"security.protocol", protocol}, {"acks", "all"}});
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << protocol << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(absl::StrCat("kafka.security.protocol=", protocol)));
    EXPECT_THAT(status.message(), HasSubstr("TLS or SASL"));
  }
  EXPECT_TRUE(CheckTransactionRecoverySupported({}).ok());
  EXPECT_TRUE(CheckTransactionRecoverySupported({{"security.protocol", "plaintext"}}).ok());
  EXPECT_TRUE(CheckTransactionRecoverySupported({{"security.protocol", "PLAINTEXT"}}).ok());
}

}  // namespace
}  // namespace weir::connectors::kafka_protocol
