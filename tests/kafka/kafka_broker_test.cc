// Checks that the test broker from scripts/kafka.sh is a real Kafka: plain produce and
// consume, and transactions whose aborted records only read_uncommitted readers see.
#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"

namespace weir::test {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::UnorderedElementsAreArray;

constexpr auto kDeadline = std::chrono::seconds(60);
constexpr int kTimeoutMs = 60000;
constexpr int kPartitions = 3;

struct Record {
  int32_t partition;
  int64_t offset;
  std::string key;
  std::string value;
};

// A global Conf with `settings`; records a failure and returns null if one is rejected.
std::unique_ptr<RdKafka::Conf> MakeConf(
    const std::vector<std::pair<std::string, std::string>>& settings) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  for (const auto& [key, value] : settings) {
    if (conf->set(key, value, err) != RdKafka::Conf::CONF_OK) {
      ADD_FAILURE() << "config " << key << "=" << value << ": " << err;
      return nullptr;
    }
  }
  return conf;
}

std::unique_ptr<RdKafka::Producer> MakeProducer(
    const std::string& bootstrap, DeliveryCounter* counter,
    std::vector<std::pair<std::string, std::string>> extra = {}) {
  extra.emplace_back("bootstrap.servers", bootstrap);
  extra.emplace_back("acks", "all");
  std::unique_ptr<RdKafka::Conf> conf = MakeConf(extra);
  if (!conf) return nullptr;
  std::string err;
  if (conf->set("dr_cb", counter, err) != RdKafka::Conf::CONF_OK) {
    ADD_FAILURE() << "dr_cb: " << err;
    return nullptr;
  }
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), err));
  if (!producer) ADD_FAILURE() << "Producer::create: " << err;
  return producer;
}

void Produce(RdKafka::Producer& producer, const std::string& topic, int32_t partition,
             const std::string& key, const std::string& value) {
  const auto deadline = Clock::now() + kDeadline;
  while (true) {
    const RdKafka::ErrorCode err = producer.produce(
        topic, partition, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(value.data()),
        value.size(), key.data(), key.size(), 0, nullptr);
    if (err == RdKafka::ERR_NO_ERROR) return;
    if (err != RdKafka::ERR__QUEUE_FULL || Clock::now() > deadline) {
      ADD_FAILURE() << "produce(" << key << "): " << RdKafka::err2str(err);
      return;
    }
    producer.poll(100);  // Serve delivery reports to make room.
  }
}

// Reads `topic` from the beginning of all its partitions (by assignment, no group
// rebalance) until at least `expected` records arrived and every partition reached its
// end (for read_committed: the last stable offset) after the last record. Records a
// failure if the deadline passes first.
std::vector<Record> ConsumeAll(const std::string& bootstrap, const std::string& topic,
                               const std::string& isolation, size_t expected) {
  std::vector<Record> records;
  std::unique_ptr<RdKafka::Conf> conf = MakeConf({
      {"bootstrap.servers", bootstrap},
      {"group.id", UniqueTopicName("weir-test-group")},
      {"enable.auto.commit", "false"},
      {"enable.partition.eof", "true"},
      {"auto.offset.reset", "earliest"},
      {"isolation.level", isolation},
  });
  if (!conf) return records;
  std::string err;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(
      RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!consumer) {
    ADD_FAILURE() << "KafkaConsumer::create: " << err;
    return records;
  }
  std::vector<RdKafka::TopicPartition*> assignment;
  for (int p = 0; p < kPartitions; ++p) {
    assignment.push_back(
        RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  }
  const RdKafka::ErrorCode assign_err = consumer->assign(assignment);
  RdKafka::TopicPartition::destroy(assignment);
  if (assign_err != RdKafka::ERR_NO_ERROR) {
    ADD_FAILURE() << "assign: " << RdKafka::err2str(assign_err);
    return records;
  }

  std::set<int32_t> at_end;
  const auto deadline = Clock::now() + kDeadline;
  while (!(records.size() >= expected && at_end.size() == kPartitions)) {
    if (Clock::now() > deadline) {
      ADD_FAILURE() << isolation << " consumer of " << topic << " timed out with "
                    << records.size() << " of " << expected << " records, "
                    << at_end.size() << " partitions at their end";
      break;
    }
    std::unique_ptr<RdKafka::Message> msg(consumer->consume(200));
    switch (msg->err()) {
      case RdKafka::ERR_NO_ERROR:
        at_end.erase(msg->partition());
        records.push_back(Record{
            msg->partition(), msg->offset(),
            msg->key() != nullptr ? *msg->key() : std::string(),
            std::string(static_cast<const char*>(msg->payload()), msg->len())});
        break;
      case RdKafka::ERR__PARTITION_EOF:
        at_end.insert(msg->partition());
        break;
      case RdKafka::ERR__TIMED_OUT:
        break;
      default:
        ADD_FAILURE() << "consume: " << msg->errstr();
        break;
    }
  }
  consumer->close();
  return records;
}

std::vector<std::string> Values(const std::vector<Record>& records) {
  std::vector<std::string> values;
  for (const Record& r : records) values.push_back(r.value);
  return values;
}

std::vector<std::string> Numbered(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back(absl::StrCat(prefix, i));
  return out;
}

TEST(KafkaBrokerTest, ProducesAndConsumesAcrossPartitions) {
  const std::string bootstrap = TestKafkaBootstrap();
  ASSERT_FALSE(bootstrap.empty());
  const std::string topic = UniqueTopicName("weir-broker-test");
  const absl::Status created = CreateTopic(bootstrap, topic, kPartitions);
  ASSERT_TRUE(created.ok()) << created;

  DeliveryCounter counter;
  // Idempotence keeps each partition in produce order across retries (the
  // first batches to a new topic may be retried while its leader is found).
  std::unique_ptr<RdKafka::Producer> producer = MakeProducer(bootstrap, &counter, {{"enable.idempotence", "true"}});
  ASSERT_NE(producer, nullptr);
  constexpr int kRecords = 100;
  for (int i = 0; i < kRecords; ++i) {
    Produce(*producer, topic, i % kPartitions, absl::StrCat("key-", i),
            absl::StrCat("value-", i));
  }
  ASSERT_EQ(producer->flush(kTimeoutMs), RdKafka::ERR_NO_ERROR);
  EXPECT_EQ(counter.failed, 0) << counter.last_error;
  ASSERT_EQ(counter.delivered, kRecords);

  const std::vector<Record> records =
      ConsumeAll(bootstrap, topic, "read_uncommitted", kRecords);
  ASSERT_EQ(records.size(), static_cast<size_t>(kRecords));
  std::map<int32_t, int64_t> last_offset;
  std::map<int32_t, int> last_index;
  std::set<int> seen;
  for (const Record& r : records) {
    ASSERT_TRUE(absl::StartsWith(r.key, "key-")) << r.key;
    const int i = std::stoi(r.key.substr(4));
    EXPECT_EQ(r.value, absl::StrCat("value-", i));
    EXPECT_EQ(r.partition, i % kPartitions) << r.key;
    EXPECT_TRUE(seen.insert(i).second) << "duplicate " << r.key;
    // Within a partition, records come back in the order they were produced.
    if (last_offset.count(r.partition)) {
      EXPECT_GT(r.offset, last_offset[r.partition]);
      EXPECT_GT(i, last_index[r.partition]);
    }
    last_offset[r.partition] = r.offset;
    last_index[r.partition] = i;
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(last_offset.size(), static_cast<size_t>(kPartitions));
}

TEST(KafkaBrokerTest, ReadCommittedHidesAbortedTransactions) {
  const std::string bootstrap = TestKafkaBootstrap();
  ASSERT_FALSE(bootstrap.empty());
  const std::string topic = UniqueTopicName("weir-broker-txn-test");
  const absl::Status created = CreateTopic(bootstrap, topic, kPartitions);
  ASSERT_TRUE(created.ok()) << created;

  DeliveryCounter counter;
  std::unique_ptr<RdKafka::Producer> producer = MakeProducer(
      bootstrap, &counter, {{"transactional.id", UniqueTopicName("weir-broker-test-txn")}});
  ASSERT_NE(producer, nullptr);
  auto check = [](RdKafka::Error* raw, const char* what) {
    std::unique_ptr<RdKafka::Error> error(raw);
    if (error) ADD_FAILURE() << what << ": " << error->str();
    return error == nullptr;
  };
  constexpr int kPerTxn = 10;

  ASSERT_TRUE(check(producer->init_transactions(kTimeoutMs), "init_transactions"));

  ASSERT_TRUE(check(producer->begin_transaction(), "begin_transaction"));
  for (int i = 0; i < kPerTxn; ++i) {
    Produce(*producer, topic, i % kPartitions, absl::StrCat("k", i),
            absl::StrCat("aborted-", i));
  }
  // Make sure the aborted records are really in the log before aborting (abort would
  // otherwise purge whatever is still queued).
  ASSERT_EQ(producer->flush(kTimeoutMs), RdKafka::ERR_NO_ERROR);
  ASSERT_EQ(counter.delivered, kPerTxn) << counter.last_error;
  ASSERT_TRUE(check(producer->abort_transaction(kTimeoutMs), "abort_transaction"));

  ASSERT_TRUE(check(producer->begin_transaction(), "begin_transaction"));
  for (int i = 0; i < kPerTxn; ++i) {
    Produce(*producer, topic, i % kPartitions, absl::StrCat("k", i),
            absl::StrCat("committed-", i));
  }
  ASSERT_TRUE(check(producer->commit_transaction(kTimeoutMs), "commit_transaction"));
  EXPECT_EQ(counter.failed, 0) << counter.last_error;
  EXPECT_EQ(counter.delivered, 2 * kPerTxn);

  const std::vector<std::string> committed = Numbered("committed-", kPerTxn);
  std::vector<std::string> all = Numbered("aborted-", kPerTxn);
  all.insert(all.end(), committed.begin(), committed.end());

  EXPECT_THAT(Values(ConsumeAll(bootstrap, topic, "read_committed", committed.size())),
              UnorderedElementsAreArray(committed));
  EXPECT_THAT(Values(ConsumeAll(bootstrap, topic, "read_uncommitted", all.size())),
              UnorderedElementsAreArray(all));
}

}  // namespace
}  // namespace weir::test
