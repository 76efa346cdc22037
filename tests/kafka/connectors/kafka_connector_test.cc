// The built-in Kafka source and sink against the real test broker: partition
// assignment, start offsets, bounded reads to the end offsets (also past
// transaction markers), read_committed, keyed writes that land where Kafka's
// Java producer puts them, and the errors users see when something is wrong.
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging/logging.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "taskmanager/metrics/task_metrics.h"
#include "taskmanager/state/operator_state.h"
#include "tests/kafka/kafka_io.h"
#include "tests/kafka/test_kafka.h"
#include "tests/testing/log_capture.h"
#include "tests/testing/process.h"
#include "weir/datastream.h"
#include "weir/job_graph.h"
#include "weir/kafka.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::weir::test::CreateTopic;
using ::weir::test::DeliveryCounter;
using ::weir::test::TestKafkaBootstrap;

// The Kafka connectors as a cluster registers them.
const ConnectorRegistry& Kafka() {
  static const ConnectorRegistry* const registry = [] {
    auto* r = new ConnectorRegistry();
    EXPECT_TRUE(RegisterKafkaConnectors(r).ok());
    return r;
  }();
  return *registry;
}
using ::weir::test::UniqueTopicName;

using PartitionKey = std::pair<std::string, int32_t>;

constexpr auto kDeadline = std::chrono::seconds(60);
constexpr int kTimeoutMs = 60000;

class FakeContext : public OperatorContext {
 public:
  // `restored`: the operator state of a checkpoint, as this subtask gets it.
  FakeContext(int subtask_index, int parallelism, taskmanager::OperatorStateSnapshot restored = {})
      : operator_state_(restored), restored_(!restored.empty()), subtask_index_(subtask_index),
        parallelism_(parallelism) {}

  const std::string& operator_name() const override { return name_; }
  int subtask_index() const override { return subtask_index_; }
  int parallelism() const override { return parallelism_; }
  KeyedStateStore* keyed_state() override { return nullptr; }
  void SetCurrentKey(std::string_view) override {}
  std::string JobConfig(std::string_view, std::string_view fallback) const override {
    return std::string(fallback);
  }
  OperatorStateStore* operator_state() override { return &operator_state_; }
  bool is_restored() const override { return restored_; }
  // The operator state as a checkpoint takes it (after SnapshotState).
  taskmanager::OperatorStateSnapshot OperatorState() const { return operator_state_.Snapshot(); }
  MetricGroup& metrics() override { return *metric_group_; }
  // What the connector registered, as /metrics would show it.
  std::string MetricsText() const {
    http::MetricFamilies out;
    metrics_.Export(out, {});
    return out.Text();
  }

 private:
  const std::string name_ = "kafka-connector-test";
  taskmanager::OperatorStateBackend operator_state_;
  const bool restored_;
  taskmanager::TaskMetrics metrics_;
  const std::unique_ptr<MetricGroup> metric_group_ = metrics_.ForOperator(name_);
  const int subtask_index_;
  const int parallelism_;
};

class CollectingOutput : public RecordOutput {
 public:
  void Emit(void* record) override {
    records.push_back(std::move(*static_cast<kafka::Record*>(record)));
    event_times.push_back(kNoTimestamp);
  }
  void EmitAt(void* record, int64_t timestamp) override {
    records.push_back(std::move(*static_cast<kafka::Record*>(record)));
    event_times.push_back(timestamp);
  }
  void EmitWatermark(int64_t watermark) override { events.push_back(absl::StrCat("watermark ", watermark)); }
  void EmitWatermarkStatus(bool idle) override { events.push_back(idle ? "idle" : "active"); }
  std::vector<kafka::Record> records;
  // The event time each record was emitted with (kNoTimestamp: none).
  std::vector<int64_t> event_times;
  // Watermarks and statuses, in order.
  std::vector<std::string> events;
};

// The properties kafka::Source / kafka::Sink put into a job graph.
Properties SourceProperties(const kafka::SourceOptions& options) {
  JobGraph graph;
  StreamEnvironment env(&graph);
  kafka::Source(env, options);
  return graph.vertices.at(0).properties;
}

Properties SinkProperties(const kafka::SinkOptions& options) {
  JobGraph graph;
  StreamEnvironment env(&graph);
  kafka::Sink(kafka::Source(env, {.brokers = "unused:9092", .topics = {"unused"}}), options);
  return graph.vertices.at(1).properties;
}

std::unique_ptr<KafkaSource> NewSource(const kafka::SourceOptions& options) {
  // As a TaskManager creates it from the job graph.
  JobGraph graph;
  StreamEnvironment env(&graph);
  kafka::Source(env, options);
  SourceContext context;
  context.timestamp_extractor = graph.vertices.at(0).timestamp_extractor;
  absl::StatusOr<std::unique_ptr<SourceOperator>> created =
      Kafka().CreateSource(kKafkaSourceConnector, graph.vertices.at(0).properties, context);
  if (!created.ok()) {
    ADD_FAILURE() << "CreateSource: " << created.status();
    return nullptr;
  }
  auto* source = dynamic_cast<KafkaSource*>(created->get());
  if (source == nullptr) {
    ADD_FAILURE() << "CreateSource did not make a KafkaSource";
    return nullptr;
  }
  created->release();
  return std::unique_ptr<KafkaSource>(source);
}

std::unique_ptr<KafkaSink> NewSink(const kafka::SinkOptions& options) {
  absl::StatusOr<std::unique_ptr<StreamOperator>> created =
      Kafka().CreateSink(kKafkaSinkConnector, SinkProperties(options));
  if (!created.ok()) {
    ADD_FAILURE() << "CreateSink: " << created.status();
    return nullptr;
  }
  auto* sink = dynamic_cast<KafkaSink*>(created->get());
  if (sink == nullptr) {
    ADD_FAILURE() << "CreateSink did not make a KafkaSink";
    return nullptr;
  }
  created->release();
  return std::unique_ptr<KafkaSink>(sink);
}

// The message of the std::runtime_error `action` throws, or "" (and a test
// failure) when it does not throw one.
template <typename Action>
std::string ErrorOf(Action action) {
  try {
    action();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a std::runtime_error";
  return "";
}

// Polls every source until it reports kEndOfInput; false if the deadline
// passes first.
bool ReadToEnd(const std::vector<KafkaSource*>& sources) {
  std::vector<bool> ended(sources.size(), false);
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    bool all = true;
    for (size_t i = 0; i < sources.size(); ++i) {
      if (!ended[i]) ended[i] = sources[i]->PollNext() == SourceStatus::kEndOfInput;
      all = all && ended[i];
    }
    if (all) return true;
  }
  return false;
}

std::map<PartitionKey, int64_t> Offsets(const std::string& topic,
                                        const std::vector<std::pair<int32_t, int64_t>>& offsets) {
  std::map<PartitionKey, int64_t> out;
  for (const auto& [partition, offset] : offsets) out[{topic, partition}] = offset;
  return out;
}

struct TestRecord {
  int32_t partition = RdKafka::Topic::PARTITION_UA;
  std::optional<std::string> key;
  std::string value;
  int64_t timestamp_ms = 0;  // 0: now
};

std::unique_ptr<RdKafka::Conf> MakeConf(
    const std::vector<std::pair<std::string, std::string>>& settings) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string error;
  for (const auto& [name, value] : settings) {
    if (conf->set(name, value, error) != RdKafka::Conf::CONF_OK) {
      ADD_FAILURE() << name << "=" << value << ": " << error;
    }
  }
  return conf;
}

// Writes `records` with the test's own producer (not the code under test); in
// one transaction, committed or aborted, when `transaction` is set.
void Produce(const std::string& bootstrap, const std::string& topic,
             const std::vector<TestRecord>& records,
             std::optional<bool> commit_transaction = std::nullopt) {
  DeliveryCounter counter;
  // Idempotent, so a retried request cannot reorder a partition: tests read
  // records back by offset.
  std::vector<std::pair<std::string, std::string>> settings = {
      {"bootstrap.servers", bootstrap}, {"acks", "all"}, {"enable.idempotence", "true"}};
  if (commit_transaction.has_value()) {
    settings.emplace_back("transactional.id", UniqueTopicName("weir-test-txn"));
  }
  std::unique_ptr<RdKafka::Conf> conf = MakeConf(settings);
  std::string error;
  ASSERT_EQ(conf->set("dr_cb", &counter, error), RdKafka::Conf::CONF_OK) << error;
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), error));
  ASSERT_NE(producer, nullptr) << error;
  if (commit_transaction.has_value()) {
    std::unique_ptr<RdKafka::Error> txn_error(producer->init_transactions(kTimeoutMs));
    ASSERT_EQ(txn_error, nullptr) << txn_error->str();
    txn_error.reset(producer->begin_transaction());
    ASSERT_EQ(txn_error, nullptr) << txn_error->str();
  }
  const auto deadline = Clock::now() + kDeadline;
  for (const TestRecord& r : records) {
    while (true) {
      const RdKafka::ErrorCode code = producer->produce(
          topic, r.partition, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(r.value.data()),
          r.value.size(), r.key ? r.key->data() : nullptr, r.key ? r.key->size() : 0,
          r.timestamp_ms, nullptr);
      if (code == RdKafka::ERR_NO_ERROR) break;
      ASSERT_EQ(code, RdKafka::ERR__QUEUE_FULL) << RdKafka::err2str(code);
      ASSERT_LT(Clock::now(), deadline) << "producer queue stayed full";
      producer->poll(100);
    }
  }
  // Aborted records must reach the log, or there would be nothing to hide.
  ASSERT_EQ(producer->flush(kTimeoutMs), RdKafka::ERR_NO_ERROR);
  if (commit_transaction.has_value()) {
    std::unique_ptr<RdKafka::Error> txn_error(*commit_transaction
                                                  ? producer->commit_transaction(kTimeoutMs)
                                                  : producer->abort_transaction(kTimeoutMs));
    ASSERT_EQ(txn_error, nullptr) << txn_error->str();
  }
  EXPECT_EQ(counter.failed, 0) << counter.last_error;
  EXPECT_EQ(counter.delivered, static_cast<int>(records.size()));
}

// A transactional producer that wrote `records` (flushed to the log) in a
// transaction it leaves open.
std::unique_ptr<RdKafka::Producer> OpenTransaction(const std::string& bootstrap,
                                                   const std::string& topic,
                                                   const std::vector<TestRecord>& records) {
  std::unique_ptr<RdKafka::Conf> conf =
      MakeConf({{"bootstrap.servers", bootstrap},
                {"transactional.id", UniqueTopicName("weir-test-txn")}});
  std::string error;
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), error));
  if (producer == nullptr) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  std::unique_ptr<RdKafka::Error> txn_error(producer->init_transactions(kTimeoutMs));
  if (txn_error == nullptr) txn_error.reset(producer->begin_transaction());
  if (txn_error != nullptr) {
    ADD_FAILURE() << txn_error->str();
    return nullptr;
  }
  for (const TestRecord& r : records) {
    const RdKafka::ErrorCode code = producer->produce(
        topic, r.partition, RdKafka::Producer::RK_MSG_COPY, const_cast<char*>(r.value.data()),
        r.value.size(), nullptr, 0, 0, nullptr);
    EXPECT_EQ(code, RdKafka::ERR_NO_ERROR) << RdKafka::err2str(code);
  }
  EXPECT_EQ(producer->flush(kTimeoutMs), RdKafka::ERR_NO_ERROR);
  return producer;
}

// Commits `offsets` for consumer group `group`, as a job that ran before would.
void CommitOffsets(const std::string& bootstrap, const std::string& group, const std::string& topic,
                   const std::vector<std::pair<int32_t, int64_t>>& offsets) {
  std::unique_ptr<RdKafka::Conf> conf = MakeConf(
      {{"bootstrap.servers", bootstrap}, {"group.id", group}, {"enable.auto.commit", "false"}});
  std::string error;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(
      RdKafka::KafkaConsumer::create(conf.get(), error));
  ASSERT_NE(consumer, nullptr) << error;
  std::vector<RdKafka::TopicPartition*> list;
  for (const auto& [partition, offset] : offsets) {
    list.push_back(RdKafka::TopicPartition::create(topic, partition, offset));
  }
  const RdKafka::ErrorCode code = consumer->commitSync(list);
  RdKafka::TopicPartition::destroy(list);
  ASSERT_EQ(code, RdKafka::ERR_NO_ERROR) << RdKafka::err2str(code);
  consumer->close();
}

// Everything in `topic` (read_uncommitted), read with the test's own consumer
// until every partition is at its high watermark.
std::vector<kafka::Record> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                     int partitions) {
  std::vector<kafka::Record> records;
  std::unique_ptr<RdKafka::Conf> conf = MakeConf({{"bootstrap.servers", bootstrap},
                                                  {"group.id", UniqueTopicName("weir-test")},
                                                  {"enable.auto.commit", "false"},
                                                  {"enable.partition.eof", "true"},
                                                  {"isolation.level", "read_uncommitted"}});
  std::string error;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(
      RdKafka::KafkaConsumer::create(conf.get(), error));
  if (consumer == nullptr) {
    ADD_FAILURE() << error;
    return records;
  }
  std::map<int32_t, int64_t> end;
  std::vector<RdKafka::TopicPartition*> list;
  for (int32_t p = 0; p < partitions; ++p) {
    int64_t low = 0;
    int64_t high = 0;
    EXPECT_EQ(consumer->query_watermark_offsets(topic, p, &low, &high, kTimeoutMs),
              RdKafka::ERR_NO_ERROR);
    if (high > 0) {
      end[p] = high;
      list.push_back(RdKafka::TopicPartition::create(topic, p, RdKafka::Topic::OFFSET_BEGINNING));
    }
  }
  consumer->assign(list);
  RdKafka::TopicPartition::destroy(list);
  const auto deadline = Clock::now() + kDeadline;
  while (!end.empty() && Clock::now() < deadline) {
    std::unique_ptr<RdKafka::Message> message(consumer->consume(100));
    if (message->err() == RdKafka::ERR_NO_ERROR) {
      kafka::Record r;
      if (message->key_pointer() != nullptr) {
        r.key.emplace(static_cast<const char*>(message->key_pointer()), message->key_len());
      }
      r.value.assign(static_cast<const char*>(message->payload()), message->len());
      r.timestamp_ms = message->timestamp().timestamp;
      r.topic = topic;
      r.partition = message->partition();
      r.offset = message->offset();
      records.push_back(std::move(r));
      if (message->offset() + 1 >= end[message->partition()]) end.erase(message->partition());
    }
  }
  EXPECT_TRUE(end.empty()) << "timed out reading " << topic;
  consumer->close();
  return records;
}

// Kafka's Java producer hashes keys with murmur2 (org.apache.kafka.common.utils.Utils);
// written here from its definition to check that the sink partitions like it.
int32_t JavaPartition(const std::string& key, int32_t partitions) {
  const uint32_t m = 0x5bd1e995;
  const size_t length = key.size();
  uint32_t h = 0x9747b28c ^ static_cast<uint32_t>(length);
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(key[i])); };
  for (size_t i = 0; i + 4 <= length; i += 4) {
    uint32_t k = byte(i) | byte(i + 1) << 8 | byte(i + 2) << 16 | byte(i + 3) << 24;
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  const size_t tail = length & ~static_cast<size_t>(3);
  switch (length % 4) {
    case 3: h ^= byte(tail + 2) << 16; [[fallthrough]];
    case 2: h ^= byte(tail + 1) << 8; [[fallthrough]];
    case 1:
      h ^= byte(tail);
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int32_t>((h & 0x7fffffff) % static_cast<uint32_t>(partitions));
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class KafkaConnectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bootstrap_ = TestKafkaBootstrap();
    ASSERT_FALSE(bootstrap_.empty());
  }

  std::string NewTopic(const std::string& prefix, int partitions) {
    const std::string topic = UniqueTopicName(prefix);
    const absl::Status created = CreateTopic(bootstrap_, topic, partitions);
    EXPECT_TRUE(created.ok()) << created;
    return topic;
  }

  std::string bootstrap_;
};

TEST_F(KafkaConnectorTest, BoundedSourceSplitsPartitionsAndReadsEveryRecordOnce) {
  constexpr int kPartitions = 4;
  constexpr int kRecords = 20000;
  const std::string topic = NewTopic("weir-source-bounded", kPartitions);
  std::vector<TestRecord> produced;
  for (int i = 0; i < kRecords; ++i) {
    produced.push_back({.partition = i % kPartitions,
                        .key = absl::StrCat("key-", i),
                        .value = absl::StrCat("value-", i)});
  }
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, produced));

  const kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}, .bounded = true};
  std::unique_ptr<KafkaSource> source0 = NewSource(options);
  std::unique_ptr<KafkaSource> source1 = NewSource(options);
  ASSERT_TRUE(source0 && source1);
  FakeContext context0(0, 2);
  FakeContext context1(1, 2);
  CollectingOutput output0;
  CollectingOutput output1;
  source0->Open(context0, &output0);
  source1->Open(context1, &output1);
  // Partition i goes to subtask i % 2.
  EXPECT_EQ(source0->CurrentOffsets(), Offsets(topic, {{0, 0}, {2, 0}}));
  EXPECT_EQ(source1->CurrentOffsets(), Offsets(topic, {{1, 0}, {3, 0}}));

  ASSERT_TRUE(ReadToEnd({source0.get(), source1.get()}));
  EXPECT_EQ(source0->PollNext(), SourceStatus::kEndOfInput);
  EXPECT_EQ(source1->PollNext(), SourceStatus::kEndOfInput);
  constexpr int64_t kPerPartition = kRecords / kPartitions;
  EXPECT_EQ(source0->CurrentOffsets(), Offsets(topic, {{0, kPerPartition}, {2, kPerPartition}}));
  EXPECT_EQ(source1->CurrentOffsets(), Offsets(topic, {{1, kPerPartition}, {3, kPerPartition}}));

  std::set<std::string> values;
  std::set<std::pair<int32_t, int64_t>> positions;
  for (const auto* output : {&output0, &output1}) {
    const int parity = output == &output0 ? 0 : 1;
    for (const kafka::Record& r : output->records) {
      EXPECT_EQ(r.topic, topic);
      EXPECT_EQ(r.partition % 2, parity) << "partition " << r.partition << " read by subtask "
                                         << parity;
      // "value-<i>" was written with key "key-<i>" to partition i % 4.
      const int i = std::stoi(r.value.substr(6));
      EXPECT_EQ(r.key, absl::StrCat("key-", i));
      EXPECT_EQ(r.partition, i % kPartitions);
      EXPECT_GT(r.timestamp_ms, 0);
      values.insert(r.value);
      positions.insert({r.partition, r.offset});
    }
    // Each record's Kafka timestamp is its event time.
    ASSERT_EQ(output->event_times.size(), output->records.size());
    for (size_t k = 0; k < output->records.size(); ++k) {
      EXPECT_EQ(output->event_times[k], output->records[k].timestamp_ms);
    }
  }
  EXPECT_EQ(output0.records.size() + output1.records.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(values.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(positions.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(source0->records_read() + source1->records_read(), kRecords);
  source0->Close();
  source1->Close();
}

// Polls `source` until it has emitted `count` records in all.
// `periodic_emit`: also runs the source's periodic emission (watermarks,
// alignment) after every poll.
void ReadRecords(KafkaSource& source, const CollectingOutput& output, size_t count, bool periodic_emit = false) {
  const auto deadline = Clock::now() + kDeadline;
  while (output.records.size() < count) {
    ASSERT_LT(Clock::now(), deadline) << "read " << output.records.size() << " of " << count << " records";
    source.PollNext();
    if (periodic_emit) source.OnPeriodicEmit();
  }
}

TEST_F(KafkaConnectorTest, EventTimeWatermarkIsTheMinimumOverPartitionsThatAreNotIdle) {
  const std::string topic = NewTopic("weir-source-watermarks", 2);
  const int64_t base = NowMs() - 3600 * 1000;
  std::vector<TestRecord> produced;
  // Partition 0 reaches base + 1009, partition 1 only base + 504.
  for (int i = 0; i < 10; ++i) produced.push_back({.partition = 0, .value = "a", .timestamp_ms = base + 1000 + i});
  for (int i = 0; i < 5; ++i) produced.push_back({.partition = 1, .value = "b", .timestamp_ms = base + 500 + i});
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, produced));

  kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}};
  options.watermarks = WatermarkStrategy<kafka::Record>{.out_of_orderness = std::chrono::milliseconds(100),
                                                         .idleness = std::chrono::seconds(1)};
  std::unique_ptr<KafkaSource> source = NewSource(options);
  ASSERT_TRUE(source);
  auto log = std::make_shared<weir::testing::LogCapture>();
  logging::Get("kafka")->sinks().push_back(log);
  FakeContext context(0, 1);
  CollectingOutput output;
  source->Open(context, &output);
  // Before any record: no watermark at all.
  source->OnPeriodicEmit();
  EXPECT_TRUE(output.events.empty());

  ASSERT_NO_FATAL_FAILURE(ReadRecords(*source, output, produced.size()));
  ASSERT_EQ(output.event_times.size(), output.records.size());
  for (size_t i = 0; i < output.records.size(); ++i) {
    EXPECT_EQ(output.event_times[i], output.records[i].timestamp_ms);
  }
  // The slower partition holds the watermark: its largest time minus the
  // bound, minus 1 ms.
  source->OnPeriodicEmit();
  EXPECT_THAT(output.events, ElementsAre(absl::StrCat("watermark ", base + 504 - 101)));
  EXPECT_THAT(context.MetricsText(), HasSubstr("weir_kafka_partition_watermark_ms"));

  // Both quiet past the idleness and read to their end: the subtask goes
  // idle, and once the broker confirmed partition 1 has nothing more, event
  // time moves to the furthest partition's (nothing is waited for any more).
  absl::SleepFor(absl::Milliseconds(1200));
  auto emit_until = [&](size_t events) {
    const auto deadline = Clock::now() + kDeadline;
    while (output.events.size() < events && Clock::now() < deadline) {
      source->PollNext();
      source->OnPeriodicEmit();
    }
  };
  emit_until(3);
  EXPECT_THAT(output.events, ElementsAre(absl::StrCat("watermark ", base + 504 - 101),
                                         absl::StrCat("watermark ", base + 1009 - 101), "idle"));

  // Partition 0 alone comes back: active again at once, and partition 1
  // (idle, nothing at the broker) holds nothing back.
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, {{.partition = 0, .value = "c", .timestamp_ms = base + 2000}}));
  ASSERT_NO_FATAL_FAILURE(ReadRecords(*source, output, produced.size() + 1));
  emit_until(5);
  EXPECT_THAT(output.events, ElementsAre(absl::StrCat("watermark ", base + 504 - 101),
                                         absl::StrCat("watermark ", base + 1009 - 101), "idle", "active",
                                         absl::StrCat("watermark ", base + 2000 - 101)));
  const std::string name = absl::StrCat(topic, "[1]");
  EXPECT_THAT(log->text(), HasSubstr(absl::StrCat("partition ", name, " idle (no record for ")));
  EXPECT_THAT(log->text(), HasSubstr("caught up with the broker at offset 5"));
  EXPECT_THAT(log->text(), HasSubstr(absl::StrCat("partition ", topic, "[0] active again")));
  source->Close();
}

// Polls `source`, running its periodic emission (watermarks, alignment)
// after every poll, until its bounded input ends. `emit_delay`: time taken
// between a poll and the periodic emission, as when the poll's emits block
// on a backpressured output.
bool ReadToEndWithWatermarks(KafkaSource& source, absl::Duration emit_delay = absl::ZeroDuration()) {
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    const SourceStatus status = source.PollNext();
    if (emit_delay > absl::ZeroDuration()) absl::SleepFor(emit_delay);
    source.OnPeriodicEmit();
    if (status == SourceStatus::kEndOfInput) return true;
  }
  return false;
}

// Of records read from two partitions of `per_partition` records each, in
// emission order: how many went out while the other partition, unfinished,
// had no record yet or was more than `drift_ms` behind (its largest
// timestamp so far). Alignment holds that to the batches read before each
// pause took effect.
size_t RecordsAheadOfTheOtherPartition(const std::vector<kafka::Record>& records, size_t per_partition,
                                       int64_t drift_ms) {
  std::array<size_t, 2> read{};
  std::array<std::optional<int64_t>, 2> largest;
  size_t ahead = 0;
  for (const kafka::Record& r : records) {
    const size_t mine = static_cast<size_t>(r.partition);
    const size_t other = 1 - mine;
    if (read[other] < per_partition && (!largest[other] || r.timestamp_ms - *largest[other] > drift_ms)) ++ahead;
    ++read[mine];
    largest[mine] = std::max(largest[mine].value_or(r.timestamp_ms), r.timestamp_ms);
  }
  return ahead;
}

// Reads `topic` at `bootstrap` (partitions 0 and 1, `per_partition` records each) to its
// end with alignment within 1 s, and checks that every record came once
// and that neither partition ran ahead of the other by more than the
// records read before a pause took effect: two polls' batches (500 records
// each) at most, one per partition.
void ExpectAlignedRead(const std::string& bootstrap, const std::string& topic, size_t per_partition,
                       absl::Duration emit_delay) {
  kafka::SourceOptions options{.brokers = bootstrap, .topics = {topic}, .bounded = true};
  options.watermarks = WatermarkStrategy<kafka::Record>{.max_drift = std::chrono::seconds(1)};
  std::unique_ptr<KafkaSource> source = NewSource(options);
  ASSERT_TRUE(source);
  auto log = std::make_shared<weir::testing::LogCapture>();
  logging::Get("kafka")->sinks().push_back(log);
  FakeContext context(0, 1);
  CollectingOutput output;
  source->Open(context, &output);
  ASSERT_TRUE(ReadToEndWithWatermarks(*source, emit_delay));

  std::set<std::pair<int32_t, int64_t>> positions;
  for (const kafka::Record& r : output.records) positions.insert({r.partition, r.offset});
  EXPECT_EQ(output.records.size(), 2 * per_partition);
  EXPECT_EQ(positions.size(), 2 * per_partition);
  const size_t ahead = RecordsAheadOfTheOtherPartition(output.records, per_partition, 1000);
  EXPECT_LE(ahead, 1000u) << ahead << " records went out while the other partition was more than 1 s behind";
  // Only the first pause is logged at info level; which partition it names
  // depends on which one the first fetch brought.
  EXPECT_THAT(log->text(), HasSubstr("] paused: its watermark "));
  EXPECT_THAT(log->text(), HasSubstr("more than watermark.max-drift-ms (1000 ms) ahead of partition "));
  source->Close();
}

// `per_partition` records in each of partitions 0 and 1, an hour ago:
// partition 1's `step_ms` apart from `base`, and partition 0's 1 ms apart
// from where partition 1's end, so that all of partition 0 is ahead.
std::vector<TestRecord> OnePartitionAhead(int64_t base, int per_partition, int64_t step_ms) {
  std::vector<TestRecord> produced;
  for (int i = 0; i < per_partition; ++i) {
    produced.push_back({.partition = 0, .value = "a", .timestamp_ms = base + per_partition * step_ms + i});
    produced.push_back({.partition = 1, .value = "b", .timestamp_ms = base + i * step_ms});
  }
  return produced;
}

TEST_F(KafkaConnectorTest, AlignedPartitionsWaitForTheSlowestOne) {
  const std::string topic = NewTopic("weir-source-aligned", 2);
  // Partition 0's records are all 100 s of event time ahead of partition
  // 1's, which span those 100 s. Unaligned, one partition's records go out
  // while the other's are far behind (or not read yet) by the thousand.
  constexpr int kPerPartition = 20000;
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, OnePartitionAhead(NowMs() - 3600 * 1000, kPerPartition, 5)));
  ASSERT_NO_FATAL_FAILURE(ExpectAlignedRead(bootstrap_, topic, kPerPartition, absl::ZeroDuration()));
}

TEST_F(KafkaConnectorTest, AlignedPartitionsStayAlignedWhileTheSourceIsBackpressured) {
  const std::string topic = NewTopic("weir-source-aligned-backpressure", 2);
  // As above, smaller (partition 1 spans 15 s); every poll takes over a second before
  // the periodic emission, so that by the wall clock every partition has
  // been without a record for a second at each alignment. Partition 1,
  // with records left to read, still holds partition 0 back.
  constexpr int kPerPartition = 1500;
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, OnePartitionAhead(NowMs() - 3600 * 1000, kPerPartition, 10)));
  ASSERT_NO_FATAL_FAILURE(ExpectAlignedRead(bootstrap_, topic, kPerPartition, absl::Milliseconds(1100)));
}

TEST_F(KafkaConnectorTest, AlignmentIsNotHeldBackByAPartitionWithoutRecords) {
  const std::string topic = NewTopic("weir-source-aligned-quiet", 2);
  const int64_t base = NowMs() - 3600 * 1000;
  std::vector<TestRecord> produced;
  for (int i = 0; i < 2000; ++i) produced.push_back({.partition = 0, .value = "a", .timestamp_ms = base + i});
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, produced));

  // Unbounded: partition 1 never has a record. Once its (empty) end is
  // read it holds partition 0 back no more, and partition 0 is read to its
  // end. (Without that rule the one-second quiet fallback would still
  // release partition 0; without both, partition 0 would stay paused.)
  kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}};
  options.watermarks = WatermarkStrategy<kafka::Record>{.max_drift = std::chrono::milliseconds(100)};
  std::unique_ptr<KafkaSource> source = NewSource(options);
  ASSERT_TRUE(source);
  FakeContext context(0, 1);
  CollectingOutput output;
  source->Open(context, &output);
  ASSERT_NO_FATAL_FAILURE(ReadRecords(*source, output, produced.size(), /*periodic_emit=*/true));
  EXPECT_EQ(output.records.size(), produced.size());
  source->Close();
}

TEST_F(KafkaConnectorTest, AtMostOnceBoundedSourceEmitsEveryRecordItCommitted) {
  // At-most-once commits each poll's batch before emitting it; a
  // partition's end read in the same poll comes after its records. 1234
  // records: the end falls inside a poll's batch (500 records at most),
  // and polls 600 ms apart let the fetch that tells the end (the one after
  // the last records) arrive before the poll that takes them.
  const std::string topic = NewTopic("weir-source-at-most-once", 1);
  std::vector<TestRecord> produced;
  for (int i = 0; i < 1234; ++i) produced.push_back({.partition = 0, .value = absl::StrCat("v", i)});
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, produced));
  kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}, .bounded = true};
  absl::StatusOr<KafkaSourceConfig> config = KafkaSourceConfig::FromProperties(SourceProperties(options));
  ASSERT_TRUE(config.ok()) << config.status();
  config->at_most_once = true;
  KafkaSource source(*config);
  FakeContext context(0, 1);
  CollectingOutput output;
  source.Open(context, &output);
  ASSERT_TRUE(ReadToEndWithWatermarks(source, absl::Milliseconds(600)));
  std::set<std::string> values;
  for (const kafka::Record& r : output.records) values.insert(r.value);
  EXPECT_EQ(output.records.size(), produced.size());
  EXPECT_EQ(values.size(), produced.size());
  source.Close();
}

// A bounded source's end offsets are fixed at the job's first start and
// checkpointed with its offsets: restored after records were appended, it
// reads the rest up to the old ends and none of the new records. Restored
// from state without ends (as an unbounded source writes it), it reads up to
// the brokers' ends at its start, and logs that.
TEST_F(KafkaConnectorTest, RestoredBoundedSourceEndsAtTheCheckpointedEndOffsets) {
  constexpr int kPartitions = 2;
  // One poll emits 500 records at most, so the checkpoint falls before
  // the first start's end.
  constexpr int kFirst = 2000;     // before the first start
  constexpr int kAppended = 1000;  // after the checkpoint
  const std::string topic = NewTopic("weir-source-bounded-restore", kPartitions);
  auto records = [](int from, int to) {
    std::vector<TestRecord> out;
    for (int i = from; i < to; ++i) out.push_back({.partition = i % kPartitions, .value = absl::StrCat("v", i)});
    return out;
  };
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, records(0, kFirst)));
  const kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}, .bounded = true};

  std::vector<std::string> values;
  taskmanager::OperatorStateSnapshot checkpoint;
  {
    std::unique_ptr<KafkaSource> source = NewSource(options);
    ASSERT_TRUE(source);
    FakeContext context(0, 1);
    CollectingOutput output;
    source->InitializeState(context);
    source->Open(context, &output);
    ASSERT_NO_FATAL_FAILURE(ReadRecords(*source, output, 1));
    ASSERT_LT(output.records.size(), static_cast<size_t>(kFirst));
    source->SnapshotState(CheckpointInfo{.checkpoint_id = 1});
    checkpoint = context.OperatorState();
    for (const kafka::Record& r : output.records) values.push_back(r.value);
    source->Close();
  }
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, records(kFirst, kFirst + kAppended)));

  auto log = std::make_shared<weir::testing::LogCapture>();
  logging::Get("kafka")->sinks().push_back(log);
  {
    std::unique_ptr<KafkaSource> source = NewSource(options);
    ASSERT_TRUE(source);
    FakeContext context(0, 1, checkpoint);
    CollectingOutput output;
    source->InitializeState(context);
    source->Open(context, &output);
    ASSERT_TRUE(ReadToEnd({source.get()}));
    for (const kafka::Record& r : output.records) values.push_back(r.value);
    EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, kFirst / 2}, {1, kFirst / 2}}));
    source->Close();
  }
  // The first start's records ("v<i>", i < kFirst), each once.
  const int appended = static_cast<int>(std::count_if(values.begin(), values.end(), [](const std::string& v) {
    return std::stoi(v.substr(1)) >= kFirst;
  }));
  EXPECT_EQ(appended, 0) << "records appended after the checkpoint were read";
  EXPECT_EQ(values.size(), static_cast<size_t>(kFirst));
  EXPECT_EQ(std::set<std::string>(values.begin(), values.end()).size(), static_cast<size_t>(kFirst));
  EXPECT_THAT(log->text(), Not(HasSubstr("restored without an end offset")));

  // State without end offsets: an unbounded source's, at the start.
  taskmanager::OperatorStateSnapshot unbounded_checkpoint;
  {
    std::unique_ptr<KafkaSource> source = NewSource({.brokers = bootstrap_, .topics = {topic}});
    ASSERT_TRUE(source);
    FakeContext context(0, 1);
    CollectingOutput output;
    source->InitializeState(context);
    source->Open(context, &output);
    source->SnapshotState(CheckpointInfo{.checkpoint_id = 1});
    unbounded_checkpoint = context.OperatorState();
    source->Close();
  }
  std::unique_ptr<KafkaSource> source = NewSource(options);
  ASSERT_TRUE(source);
  FakeContext context(0, 1, unbounded_checkpoint);
  CollectingOutput output;
  source->InitializeState(context);
  source->Open(context, &output);
  ASSERT_TRUE(ReadToEnd({source.get()}));
  EXPECT_EQ(output.records.size(), static_cast<size_t>(kFirst + kAppended));
  constexpr int64_t kEnd = (kFirst + kAppended) / kPartitions;
  EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, kEnd}, {1, kEnd}}));
  EXPECT_THAT(log->text(), HasSubstr("restored without an end offset for 2 partitions"));
  EXPECT_THAT(log->text(), HasSubstr(absl::StrCat(topic, "[0] ", kEnd, ", ", topic, "[1] ", kEnd)));
  source->Close();
}

TEST_F(KafkaConnectorTest, EventTimeOfAQuietPartitionIsLoggedAndBoundedPartitionsEndIt) {
  const std::string topic = NewTopic("weir-source-stall", 3);
  const int64_t base = NowMs() - 3600 * 1000;
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic,
                                  {{.partition = 0, .value = "a", .timestamp_ms = base + 1000},
                                   {.partition = 1, .value = "b", .timestamp_ms = base + 50}}));
  auto log = std::make_shared<weir::testing::LogCapture>();
  logging::Get("kafka")->sinks().push_back(log);

  // Unbounded, without idleness: partition 1 holds the watermark, and after
  // the (shortened) stall warning the log names it and the one ahead.
  // Partition 2 never had a record: it holds at the start of time.
  kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}};
  options.watermarks = WatermarkStrategy<kafka::Record>{};
  Properties properties = SourceProperties(options);
  absl::StatusOr<KafkaSourceConfig> config = KafkaSourceConfig::FromProperties(properties);
  ASSERT_TRUE(config.ok()) << config.status();
  config->event_time->stall_warning_ms = 100;
  {
    KafkaSource source(*config);
    FakeContext context(0, 1);
    CollectingOutput output;
    source.Open(context, &output);
    ASSERT_NO_FATAL_FAILURE(ReadRecords(source, output, 2));
    absl::SleepFor(absl::Milliseconds(150));
    source.OnPeriodicEmit();
    EXPECT_TRUE(output.events.empty()) << "partition 2 has no record, so no watermark yet";
    EXPECT_THAT(log->text(), HasSubstr(absl::StrCat("partition ", topic, "[2] has had no record for ")));
    EXPECT_THAT(log->text(), HasSubstr(absl::StrCat("while partition ", topic, "[0] is at ")));
    EXPECT_THAT(log->text(), HasSubstr("set the watermark strategy's idleness"));
    source.Close();
  }

  // Bounded: every partition reaching its end offset ends event time; a
  // subtask without partitions is idle from its first tick.
  options.bounded = true;
  std::unique_ptr<KafkaSource> source = NewSource(options);
  std::unique_ptr<KafkaSource> empty = NewSource(options);
  ASSERT_TRUE(source && empty);
  FakeContext context(0, 1);
  FakeContext empty_context(3, 4);  // 3 partitions: subtask 3 of 4 has none
  CollectingOutput output;
  CollectingOutput empty_output;
  source->Open(context, &output);
  empty->Open(empty_context, &empty_output);
  ASSERT_TRUE(ReadToEnd({source.get(), empty.get()}));
  source->OnPeriodicEmit();
  empty->OnPeriodicEmit();
  EXPECT_THAT(output.events, ElementsAre(absl::StrCat("watermark ", kMaxWatermark)));
  EXPECT_THAT(empty_output.events, ElementsAre("idle"));
  source->Close();
  empty->Close();
}

TEST_F(KafkaConnectorTest, InvalidEventTimesFailTheJobOrAreDroppedAndCounted) {
  const std::string topic = NewTopic("weir-source-invalid-time", 1);
  const int64_t now = NowMs();
  // The broker takes timestamps up to an hour ahead; the source is told
  // that a minute ahead is too far.
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic,
                                  {{.partition = 0, .value = "1000", .timestamp_ms = now - 1000},
                                   {.partition = 0, .value = "-5", .timestamp_ms = now + 30 * 60 * 1000},
                                   {.partition = 0, .value = "3000", .timestamp_ms = now - 500}}));
  kafka::SourceOptions options{.brokers = bootstrap_, .topics = {topic}, .bounded = true};
  options.watermarks = WatermarkStrategy<kafka::Record>{.max_future = std::chrono::minutes(1)};
  {
    std::unique_ptr<KafkaSource> source = NewSource(options);
    ASSERT_TRUE(source);
    FakeContext context(0, 1);
    CollectingOutput output;
    source->Open(context, &output);
    std::string error;
    try {
      ReadToEnd({source.get()});
    } catch (const UnrecoverableError& e) {
      error = e.what();
    }
    EXPECT_THAT(error, HasSubstr(absl::StrCat("the record at offset 1 of partition ", topic, "[0]")));
    EXPECT_THAT(error, HasSubstr("ahead of the wall clock"));
    EXPECT_THAT(error, HasSubstr("invalid_timestamps to kDrop"));
    EXPECT_EQ(output.records.size(), 1u) << "nothing after the invalid record";
    source->Close();
  }

  // An extractor reading the value, and kDrop: the negative time is
  // dropped and counted, the rest carries the extracted times.
  options.watermarks = WatermarkStrategy<kafka::Record>{
      .timestamp = [](const kafka::Record& r) { return std::stoll(r.value); },
      .invalid_timestamps = InvalidTimestamps::kDrop};
  std::unique_ptr<KafkaSource> source = NewSource(options);
  ASSERT_TRUE(source);
  FakeContext context(0, 1);
  CollectingOutput output;
  source->Open(context, &output);
  ASSERT_TRUE(ReadToEnd({source.get()}));
  EXPECT_THAT(output.event_times, ElementsAre(1000, 3000));
  EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, 3}})) << "a dropped record is still consumed";
  EXPECT_THAT(context.MetricsText(), HasSubstr("weir_event_time_dropped_records_total"));
  EXPECT_THAT(context.MetricsText(), ::testing::ContainsRegex("weir_event_time_dropped_records_total\\{[^}]*\\} 1"));
  source->Close();

  // A graph that says "extractor" but gives none is refused.
  Properties properties = SourceProperties(options);
  EXPECT_THAT(Kafka().CreateSource(kKafkaSourceConnector, properties, {}).status().message(),
              HasSubstr("the job gave no extractor"));
}

TEST_F(KafkaConnectorTest, AssignsSortedPartitionsOfAllTopicsRoundRobin) {
  // Named so that the second topic sorts first.
  const std::string first = NewTopic("weir-aa", 2);
  const std::string second = NewTopic("weir-zz", 1);
  const kafka::SourceOptions options{.brokers = bootstrap_, .topics = {second, first}};

  // (aa,0) (aa,1) (zz,0) over two subtasks.
  std::unique_ptr<KafkaSource> source0 = NewSource(options);
  std::unique_ptr<KafkaSource> source1 = NewSource(options);
  ASSERT_TRUE(source0 && source1);
  FakeContext context0(0, 2);
  FakeContext context1(1, 2);
  CollectingOutput output;
  source0->Open(context0, &output);
  source1->Open(context1, &output);
  EXPECT_EQ(source0->CurrentOffsets(),
            (std::map<PartitionKey, int64_t>{{{first, 0}, 0}, {{second, 0}, 0}}));
  EXPECT_EQ(source1->CurrentOffsets(), (std::map<PartitionKey, int64_t>{{{first, 1}, 0}}));

  // A subtask without partitions: nothing now (unbounded), the end (bounded).
  FakeContext context3(3, 4);
  std::unique_ptr<KafkaSource> idle = NewSource(options);
  ASSERT_TRUE(idle);
  idle->Open(context3, &output);
  EXPECT_TRUE(idle->CurrentOffsets().empty());
  EXPECT_EQ(idle->PollNext(), SourceStatus::kNothingAvailable);

  kafka::SourceOptions bounded = options;
  bounded.bounded = true;
  std::unique_ptr<KafkaSource> idle_bounded = NewSource(bounded);
  ASSERT_TRUE(idle_bounded);
  idle_bounded->Open(context3, &output);
  EXPECT_EQ(idle_bounded->PollNext(), SourceStatus::kEndOfInput);
  EXPECT_TRUE(output.records.empty());
}

TEST_F(KafkaConnectorTest, StartsAtLatestCommittedOrTimestamp) {
  const std::string topic = NewTopic("weir-source-start", 2);
  const int64_t base_ms = NowMs() - 600000;
  std::vector<TestRecord> produced;
  for (int i = 0; i < 100; ++i) {
    produced.push_back({.partition = i % 2,
                        .key = std::nullopt,
                        .value = absl::StrCat("old-", i),
                        .timestamp_ms = base_ms + i});
  }
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, produced));
  FakeContext context(0, 1);

  {  // latest, bounded: nothing of the old data, and done at once.
    std::unique_ptr<KafkaSource> source =
        NewSource({.brokers = bootstrap_, .topics = {topic}, .start = "latest", .bounded = true});
    ASSERT_TRUE(source);
    CollectingOutput output;
    source->Open(context, &output);
    EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, 50}, {1, 50}}));
    EXPECT_EQ(source->PollNext(), SourceStatus::kEndOfInput);
    EXPECT_TRUE(output.records.empty());
  }

  {  // latest, unbounded: only what is written after Open.
    std::unique_ptr<KafkaSource> source =
        NewSource({.brokers = bootstrap_, .topics = {topic}, .start = "latest"});
    ASSERT_TRUE(source);
    CollectingOutput output;
    source->Open(context, &output);
    ASSERT_NO_FATAL_FAILURE(
        Produce(bootstrap_, topic, {{.partition = 1, .value = "new-0"}, {.partition = 0, .value = "new-1"}}));
    const auto deadline = Clock::now() + kDeadline;
    while (output.records.size() < 2 && Clock::now() < deadline) source->PollNext();
    ASSERT_EQ(output.records.size(), 2u);
    // Partition-end events may still come in (kMoreAvailable), but no records.
    SourceStatus status = SourceStatus::kMoreAvailable;
    for (int i = 0; i < 50 && status != SourceStatus::kNothingAvailable; ++i) status = source->PollNext();
    EXPECT_EQ(status, SourceStatus::kNothingAvailable);
    EXPECT_EQ(output.records.size(), 2u);
    std::set<std::string> values = {output.records[0].value, output.records[1].value};
    EXPECT_EQ(values, (std::set<std::string>{"new-0", "new-1"}));
  }
  // The topic now holds 51 records in each partition.

  {  // committed: from the group's offset, earliest where it committed none.
    const std::string group = UniqueTopicName("weir-test-group");
    ASSERT_NO_FATAL_FAILURE(CommitOffsets(bootstrap_, group, topic, {{0, 10}}));
    std::unique_ptr<KafkaSource> source = NewSource({.brokers = bootstrap_,
                                                     .topics = {topic},
                                                     .start = "committed",
                                                     .group_id = group,
                                                     .bounded = true});
    ASSERT_TRUE(source);
    CollectingOutput output;
    source->Open(context, &output);
    EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, 10}, {1, 0}}));
    ASSERT_TRUE(ReadToEnd({source.get()}));
    std::map<int32_t, std::set<int64_t>> offsets;
    for (const kafka::Record& r : output.records) offsets[r.partition].insert(r.offset);
    EXPECT_EQ(offsets[0].size(), 41u);
    EXPECT_EQ(*offsets[0].begin(), 10);
    EXPECT_EQ(offsets[1].size(), 51u);
    EXPECT_EQ(*offsets[1].begin(), 0);
  }

  {  // timestamp: the first record at or after it, in each partition.
    const int64_t start_ms = base_ms + 60;
    std::unique_ptr<KafkaSource> source = NewSource({.brokers = bootstrap_,
                                                     .topics = {topic},
                                                     .start = absl::StrCat("timestamp:", start_ms),
                                                     .bounded = true});
    ASSERT_TRUE(source);
    CollectingOutput output;
    source->Open(context, &output);
    // Record i (partition i % 2, offset i / 2) has timestamp base + i.
    EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, 30}, {1, 30}}));
    ASSERT_TRUE(ReadToEnd({source.get()}));
    std::set<std::string> values;
    for (const kafka::Record& r : output.records) values.insert(r.value);
    std::set<std::string> expected = {"new-0", "new-1"};
    for (int i = 60; i < 100; ++i) expected.insert(absl::StrCat("old-", i));
    EXPECT_EQ(values, expected);
  }
}

TEST_F(KafkaConnectorTest, ReadCommittedSkipsAbortedTransactionsAndStillEnds) {
  const std::string topic = NewTopic("weir-source-txn", 1);
  std::vector<TestRecord> committed;
  std::vector<TestRecord> aborted;
  std::vector<TestRecord> pending;
  for (int i = 0; i < 100; ++i) committed.push_back({.partition = 0, .value = absl::StrCat("committed-", i)});
  for (int i = 0; i < 50; ++i) aborted.push_back({.partition = 0, .value = absl::StrCat("aborted-", i)});
  for (int i = 0; i < 20; ++i) pending.push_back({.partition = 0, .value = absl::StrCat("pending-", i)});
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, committed, /*commit_transaction=*/true));
  // The last stable offset now follows an abort marker: a control record.
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, topic, aborted, /*commit_transaction=*/false));
  // 100 + commit marker + 50 + abort marker.
  constexpr int64_t kLastStableOffset = 152;
  // A transaction still open when the sources start: read_committed must not
  // wait for it, read_uncommitted reads it.
  std::unique_ptr<RdKafka::Producer> open_transaction = OpenTransaction(bootstrap_, topic, pending);
  ASSERT_NE(open_transaction, nullptr);

  struct Expected {
    std::string isolation;
    int64_t end_offset;
    size_t aborted;
    size_t pending;
  };
  FakeContext context(0, 1);
  for (const Expected& expected : {Expected{"read_committed", kLastStableOffset, 0, 0},
                                   Expected{"read_uncommitted", kLastStableOffset + 20, 50, 20}}) {
    SCOPED_TRACE(expected.isolation);
    std::unique_ptr<KafkaSource> source = NewSource({.brokers = bootstrap_,
                                                     .topics = {topic},
                                                     .isolation_level = expected.isolation,
                                                     .bounded = true});
    ASSERT_TRUE(source);
    CollectingOutput output;
    source->Open(context, &output);
    ASSERT_TRUE(ReadToEnd({source.get()}));
    EXPECT_EQ(source->CurrentOffsets(), Offsets(topic, {{0, expected.end_offset}}));
    std::map<std::string, size_t> seen;
    for (const kafka::Record& r : output.records) ++seen[r.value.substr(0, r.value.find('-'))];
    EXPECT_EQ(seen["committed"], 100u);
    EXPECT_EQ(seen["aborted"], expected.aborted);
    EXPECT_EQ(seen["pending"], expected.pending);
  }
  std::unique_ptr<RdKafka::Error> abort_error(open_transaction->abort_transaction(kTimeoutMs));
  EXPECT_EQ(abort_error, nullptr) << abort_error->str();
}

// The smallest memory budget a client may get (taskmanager.memory.task.off-heap.size
// divided among slots, source and sink): the prefetch queue holds 1000
// records, so the source's consumer stops fetching and is woken up again
// many times over 20000 records. Every record still arrives once, in each
// partition's order, and the sink, with its queue at the same budget,
// delivers all of them.
TEST_F(KafkaConnectorTest, SmallestMemoryBudgetStillCopiesEveryRecordOnce) {
  constexpr int kPartitions = 2;
  constexpr int kRecords = 20000;
  const std::string in = NewTopic("weir-source-small-budget", kPartitions);
  const std::string out = NewTopic("weir-sink-small-budget", kPartitions);
  std::vector<TestRecord> produced;
  for (int i = 0; i < kRecords; ++i) {
    produced.push_back({.partition = i % kPartitions, .key = absl::StrCat("key-", i), .value = absl::StrCat("value-", i)});
  }
  ASSERT_NO_FATAL_FAILURE(Produce(bootstrap_, in, produced));

  const KafkaClientMemory memory{.consumer_bytes = kMinKafkaClientMemoryBytes,
                                 .producer_bytes = kMinKafkaClientMemoryBytes};
  const KafkaSourceConnector source_connector({}, memory);
  const KafkaSinkConnector sink_connector({}, memory);
  auto created_source = source_connector.CreateSource(
      SourceProperties({.brokers = bootstrap_, .topics = {in}, .bounded = true}), {});
  ASSERT_TRUE(created_source.ok()) << created_source.status();
  auto created_sink = sink_connector.CreateSink(
      SinkProperties({.brokers = bootstrap_, .topic = out, .guarantee = kafka::Guarantee::kAtLeastOnce}));
  ASSERT_TRUE(created_sink.ok()) << created_sink.status();
  auto* source = dynamic_cast<KafkaSource*>(created_source->get());
  ASSERT_NE(source, nullptr);
  FakeContext context(0, 1);
  CollectingOutput output;
  source->Open(context, &output);
  (*created_sink)->Open(context, nullptr);
  ASSERT_TRUE(ReadToEnd({source}));
  EXPECT_EQ(output.records.size(), static_cast<size_t>(kRecords));
  std::map<int32_t, int64_t> next_offset;
  std::set<std::string> values;
  for (kafka::Record& r : output.records) {
    EXPECT_EQ(r.offset, next_offset[r.partition]++) << "partition " << r.partition;
    values.insert(r.value);
    (*created_sink)->Process(&r);
  }
  EXPECT_EQ(values.size(), static_cast<size_t>(kRecords));
  (*created_sink)->EndInput();
  (*created_sink)->Close();
  source->Close();

  const std::vector<kafka::Record> copied = ReadTopic(bootstrap_, out, kPartitions);
  std::set<std::string> copied_values;
  for (const kafka::Record& r : copied) copied_values.insert(r.value);
  EXPECT_EQ(copied.size(), static_cast<size_t>(kRecords));
  EXPECT_EQ(copied_values, values);
}

TEST_F(KafkaConnectorTest, AtLeastOnceSinkDeliversEverythingBeforeEndInputReturns) {
  constexpr int kPartitions = 3;
  constexpr int kRecords = 3000;
  const std::string topic = NewTopic("weir-sink", kPartitions);
  const int64_t base_ms = NowMs() - 60000;
  std::vector<kafka::Record> written;
  for (int i = 0; i < kRecords; ++i) {
    kafka::Record r;
    if (i % 10 != 0) r.key = absl::StrCat("key-", i % 37);
    r.value = absl::StrCat("value-", i);
    r.timestamp_ms = base_ms + i;
    written.push_back(std::move(r));
  }

  std::unique_ptr<KafkaSink> sink = NewSink(
      {.brokers = bootstrap_, .topic = topic, .guarantee = kafka::Guarantee::kAtLeastOnce});
  ASSERT_TRUE(sink);
  FakeContext context(0, 1);
  sink->Open(context, nullptr);
  for (kafka::Record r : written) sink->Process(&r);
  sink->EndInput();
  EXPECT_EQ(sink->delivered(), kRecords);
  EXPECT_EQ(sink->failed(), 0);
  sink->Close();

  const std::vector<kafka::Record> read = ReadTopic(bootstrap_, topic, kPartitions);
  ASSERT_EQ(read.size(), static_cast<size_t>(kRecords));
  std::map<std::string, const kafka::Record*> by_value;
  for (const kafka::Record& r : read) by_value[r.value] = &r;
  ASSERT_EQ(by_value.size(), static_cast<size_t>(kRecords)) << "duplicates";
  for (const kafka::Record& w : written) {
    ASSERT_EQ(by_value.count(w.value), 1u) << w.value;
    const kafka::Record& r = *by_value[w.value];
    EXPECT_EQ(r.key, w.key) << w.value;
    EXPECT_EQ(r.timestamp_ms, w.timestamp_ms) << w.value;
    if (w.key.has_value()) {
      EXPECT_EQ(r.partition, JavaPartition(*w.key, kPartitions)) << "key " << *w.key;
    }
  }
}

TEST_F(KafkaConnectorTest, AtMostOnceSinkWrites) {
  const std::string topic = NewTopic("weir-sink-amo", 2);
  std::unique_ptr<KafkaSink> sink = NewSink(
      {.brokers = bootstrap_, .topic = topic, .guarantee = kafka::Guarantee::kAtMostOnce});
  ASSERT_TRUE(sink);
  FakeContext context(0, 1);
  sink->Open(context, nullptr);
  for (int i = 0; i < 500; ++i) {
    kafka::Record r{.key = absl::StrCat("k", i), .value = absl::StrCat("v", i)};
    sink->Process(&r);
  }
  sink->EndInput();
  EXPECT_EQ(sink->delivered(), 500);
  EXPECT_EQ(sink->failed(), 0);
  sink->Close();
  EXPECT_EQ(ReadTopic(bootstrap_, topic, 2).size(), 500u);
}

TEST_F(KafkaConnectorTest, SourceOnMissingTopicFailsOpenNamingIt) {
  const std::string topic = UniqueTopicName("weir-missing");
  std::unique_ptr<KafkaSource> source =
      NewSource({.brokers = bootstrap_, .topics = {topic}, .bounded = true});
  ASSERT_TRUE(source);
  FakeContext context(0, 1);
  CollectingOutput output;
  const std::string error = ErrorOf([&] { source->Open(context, &output); });
  EXPECT_THAT(error, HasSubstr(absl::StrCat("Kafka topic '", topic, "' does not exist on brokers ",
                                            bootstrap_, " (create it first, e.g. weir kafka create-topic --brokers ")));
  source->Close();
}

TEST_F(KafkaConnectorTest, SinkOnMissingTopicFailsOpenNamingIt) {
  const std::string topic = UniqueTopicName("weir-missing");
  std::unique_ptr<KafkaSink> sink = NewSink({.brokers = bootstrap_, .topic = topic});
  ASSERT_TRUE(sink);
  FakeContext context(0, 1);
  const std::string error = ErrorOf([&] { sink->Open(context, nullptr); });
  EXPECT_THAT(error, HasSubstr(absl::StrCat("Kafka topic '", topic, "' does not exist on brokers ",
                                            bootstrap_, " (create it first, e.g. weir kafka create-topic --brokers ")));
  sink->Close();
}

TEST_F(KafkaConnectorTest, UnreachableBrokersFailOpenWithinTheTimeout) {
  const std::string brokers = absl::StrCat("127.0.0.1:", weir::testing::FreePort());
  const std::map<std::string, std::string> short_timeout = {{"socket.timeout.ms", "2000"}};
  const std::string expected = absl::StrCat("cannot reach Kafka brokers at ", brokers, " within 2 s");
  FakeContext context(0, 1);
  {
    std::unique_ptr<KafkaSource> source = NewSource(
        {.brokers = brokers, .topics = {"anything"}, .bounded = true, .properties = short_timeout});
    ASSERT_TRUE(source);
    CollectingOutput output;
    const auto start = Clock::now();
    const std::string error = ErrorOf([&] { source->Open(context, &output); });
    source->Close();
    EXPECT_THAT(error, HasSubstr(expected));
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  }
  {
    std::unique_ptr<KafkaSink> sink =
        NewSink({.brokers = brokers, .topic = "anything", .properties = short_timeout});
    ASSERT_TRUE(sink);
    const auto start = Clock::now();
    const std::string error = ErrorOf([&] { sink->Open(context, nullptr); });
    sink->Close();
    EXPECT_THAT(error, HasSubstr(expected));
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  }
}

TEST_F(KafkaConnectorTest, AtLeastOnceSinkFailsWhenTheBrokerRejectsARecord) {
  const std::string topic = NewTopic("weir-sink-reject", 1);
  // The producer lets a 2 MB record through; the broker (1 MB max.message.bytes) rejects it.
  std::unique_ptr<KafkaSink> sink = NewSink(
      {.brokers = bootstrap_, .topic = topic, .properties = {{"message.max.bytes", "5000000"}}});
  ASSERT_TRUE(sink);
  FakeContext context(0, 1);
  sink->Open(context, nullptr);
  kafka::Record big{.value = std::string(2 << 20, 'x')};
  const std::string error = ErrorOf([&] {
    sink->Process(&big);
    sink->EndInput();
  });
  EXPECT_THAT(error, HasSubstr(absl::StrCat("cannot write to Kafka topic '", topic, "'")));
  EXPECT_EQ(sink->failed(), 1);
  EXPECT_EQ(sink->delivered(), 0);
  sink->Close();
}

TEST(ConnectorValidationTest, AcceptsWhatTheJobApiWrites) {
  EXPECT_TRUE(Kafka().Validate(kKafkaSourceConnector,
                                SourceProperties({.brokers = "k1:9092,k2:9092",
                                                  .topics = {"a", "b.c_d-e"},
                                                  .start = "timestamp:1700000000000",
                                                  .isolation_level = "read_uncommitted",
                                                  .bounded = true,
                                                  .properties = {{"fetch.max.bytes", "1000000"}}}))
                  .ok());
  EXPECT_TRUE(Kafka().Validate(kKafkaSourceConnector,
                                SourceProperties({.brokers = "k1:9092",
                                                  .topics = {"a"},
                                                  .start = "committed",
                                                  .group_id = "g"}))
                  .ok());
  EXPECT_TRUE(Kafka().Validate(kKafkaSinkConnector,
                                SinkProperties({.brokers = "k1:9092",
                                                .topic = "out",
                                                .guarantee = kafka::Guarantee::kAtMostOnce,
                                                .properties = {{"partitioner", "consistent_random"},
                                                               {"acks", "0"}}}))
                  .ok());
  EXPECT_TRUE(Kafka().Validate(kKafkaSinkConnector,
                                SinkProperties({.brokers = "k1:9092", .topic = "out"}))
                  .ok());
  kafka::SourceOptions timed{.brokers = "k1:9092", .topics = {"a"}};
  timed.watermarks = WatermarkStrategy<kafka::Record>{.out_of_orderness = std::chrono::seconds(5),
                                                       .idleness = std::chrono::minutes(1),
                                                       .timestamp = [](const kafka::Record&) { return 0; },
                                                       .invalid_timestamps = InvalidTimestamps::kDrop,
                                                       .max_drift = std::chrono::seconds(2)};
  const Properties timed_properties = SourceProperties(timed);
  EXPECT_TRUE(Kafka().Validate(kKafkaSourceConnector, timed_properties).ok());
  absl::StatusOr<KafkaSourceConfig> config = KafkaSourceConfig::FromProperties(timed_properties);
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->event_time.has_value());
  EXPECT_EQ(config->event_time->out_of_orderness_ms, 5000);
  EXPECT_EQ(config->event_time->idleness_ms, 60000);
  EXPECT_EQ(config->event_time->max_future_ms, 24 * 3600 * 1000);
  EXPECT_EQ(config->event_time->max_drift_ms, 2000);
  EXPECT_TRUE(config->event_time->drop_invalid);
  EXPECT_TRUE(config->event_time->extractor);
}

TEST(ConnectorValidationTest, ExactlyOnceGetsATransactionalIdPrefix) {
  // The DataStream API derives one from the sink's name and topic...
  Properties properties =
      SinkProperties({.brokers = "k1:9092", .topic = "out", .guarantee = kafka::Guarantee::kExactlyOnce});
  EXPECT_EQ(properties["transactional.id.prefix"], "weir-KafkaSink-out");
  EXPECT_TRUE(Kafka().Validate(kKafkaSinkConnector, properties).ok());
  absl::StatusOr<std::unique_ptr<StreamOperator>> sink = Kafka().CreateSink(kKafkaSinkConnector, properties);
  ASSERT_TRUE(sink.ok()) << sink.status();
  EXPECT_NE(dynamic_cast<KafkaTransactionalSink*>(sink->get()), nullptr);
  // ...or takes the user's.
  properties = SinkProperties({.brokers = "k1:9092",
                               .topic = "out",
                               .guarantee = kafka::Guarantee::kExactlyOnce,
                               .transactional_id_prefix = "orders.v2"});
  EXPECT_EQ(properties["transactional.id.prefix"], "orders.v2");

  // A graph without one, or with one Kafka would not take, is refused.
  properties.erase("transactional.id.prefix");
  absl::Status status = Kafka().Validate(kKafkaSinkConnector, properties);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("transactional.id.prefix"));
  properties["transactional.id.prefix"] = "a b";
  EXPECT_EQ(Kafka().Validate(kKafkaSinkConnector, properties).code(), absl::StatusCode::kInvalidArgument);

  // The sink names its transactions itself, and recovery speaks plaintext only.
  properties = SinkProperties({.brokers = "k1:9092",
                               .topic = "out",
                               .guarantee = kafka::Guarantee::kExactlyOnce,
                               .properties = {{"transactional.id", "mine"}}});
  status = Kafka().Validate(kKafkaSinkConnector, properties);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("transactional id prefix"));
  properties = SinkProperties({.brokers = "k1:9092",
                               .topic = "out",
                               .guarantee = kafka::Guarantee::kExactlyOnce,
                               .properties = {{"security.protocol", "ssl"}}});
  EXPECT_EQ(Kafka().Validate(kKafkaSinkConnector, properties).code(), absl::StatusCode::kUnimplemented);
}

TEST(CommittableTest, RoundTripsAndRefusesWhatItDidNotWrite) {
  const Committable c{TransactionalId("weir-sink-out", 1, 3), 4711, 2, 42, 1};
  EXPECT_EQ(c.transactional_id, "weir-sink-out-1-3");
  absl::StatusOr<Committable> back = Committable::Decode(c.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->transactional_id, c.transactional_id);
  EXPECT_EQ(back->producer_id, 4711);
  EXPECT_EQ(back->producer_epoch, 2);
  EXPECT_EQ(back->checkpoint_id, 42);
  EXPECT_EQ(back->subtask, 1);
  for (const char* bad : {"", "v1", "v2 1 42 4711 2 t", "v1 1 42 4711 70000 t", "v1 1 42 -1 2 t", "v1 x 42 4711 2 t",
                          "v1 1 42 4711 2 "}) {
    EXPECT_EQ(Committable::Decode(bad).status().code(), absl::StatusCode::kDataLoss) << bad;
  }
}

TEST(ConnectorValidationTest, RejectsMalformedPropertiesNamingThem) {
  const Properties source = {{"brokers", "k1:9092"}, {"topics", "a,b"},
                             {"start", "earliest"},  {"group.id", ""},
                             {"isolation.level", "read_committed"}, {"bounded", "false"}};
  const Properties sink = {{"brokers", "k1:9092"}, {"topic", "out"}, {"guarantee", "at-least-once"}};
  auto with = [](Properties properties, const std::string& key, std::optional<std::string> value) {
    if (value.has_value()) {
      properties[key] = *value;
    } else {
      properties.erase(key);
    }
    return properties;
  };
  struct Case {
    std::string connector;
    Properties properties;
    std::string expected;  // part of the message
  };
  const std::vector<Case> cases = {
      {"kafka-source", with(source, "brokers", std::nullopt), "property 'brokers'"},
      {"kafka-source", with(source, "brokers", " "), "property 'brokers'"},
      {"kafka-source", with(source, "brokers", "k1:9092,,k2:9092"), "property 'brokers'"},
      {"kafka-source", with(source, "topics", ""), "property 'topics'"},
      {"kafka-source", with(source, "topics", "a,,b"), "property 'topics'"},
      {"kafka-source", with(source, "topics", "bad topic"), "property 'topics'"},
      {"kafka-source", with(source, "start", "beginning"), "property 'start'"},
      {"kafka-source", with(source, "start", "timestamp:soon"), "property 'start'"},
      {"kafka-source", with(source, "start", "timestamp:-5"), "property 'start'"},
      {"kafka-source", with(source, "start", "committed"), "property 'group.id'"},
      {"kafka-source", with(source, "isolation.level", "serializable"), "property 'isolation.level'"},
      {"kafka-source", with(source, "bounded", "yes"), "property 'bounded'"},
      {"kafka-source", with(source, "topic", "a"), "unknown property 'topic'"},
      {"kafka-source", with(source, "kafka.no.such.property", "1"), "property 'kafka.no.such.property'"},
      {"kafka-source", with(source, "kafka.fetch.max.bytes", "lots"), "property 'kafka.fetch.max.bytes'"},
      {"kafka-source", with(source, "kafka.bootstrap.servers", "x:1"), "property 'kafka.bootstrap.servers'"},
      {"kafka-source", with(source, "kafka.enable.auto.commit", "true"), "property 'kafka.enable.auto.commit'"},
      {"kafka-source", with(source, "watermark.idleness-ms", "5"), "needs 'weir.event-time' = 'source'"},
      {"kafka-source", with(source, "weir.event-time", "sink"), "property 'weir.event-time'"},
      {"kafka-source", with(with(source, "weir.event-time", "source"), "watermark.idleness-ms", "-1"),
       "property 'watermark.idleness-ms'"},
      {"kafka-source", with(with(source, "weir.event-time", "source"), "watermark.max-drift-ms", "-1"),
       "property 'watermark.max-drift-ms'"},
      {"kafka-source", with(with(source, "weir.event-time", "source"), "watermark.out-of-orderness-ms", "5s"),
       "property 'watermark.out-of-orderness-ms'"},
      {"kafka-source", with(with(source, "weir.event-time", "source"), "watermark.invalid-timestamps", "ignore"),
       "property 'watermark.invalid-timestamps'"},
      {"kafka-source", with(with(source, "weir.event-time", "source"), "watermark.timestamps", "header"),
       "property 'watermark.timestamps'"},
      {"kafka-sink", with(sink, "brokers", ""), "property 'brokers'"},
      {"kafka-sink", with(sink, "topic", std::nullopt), "property 'topic'"},
      {"kafka-sink", with(sink, "topic", "a,b"), "property 'topic'"},
      {"kafka-sink", with(sink, "guarantee", "maybe-once"), "property 'guarantee'"},
      {"kafka-sink", with(sink, "kafka.acks", "1"), "property 'kafka.acks'"},
      {"kafka-sink", with(sink, "kafka.enable.idempotence", "false"), "property 'kafka.enable.idempotence'"},
      {"kafka-sink", with(sink, "kafka.transactional.id", "t"), "property 'kafka.transactional.id'"},
      {"kafka-sink", with(with(sink, "guarantee", "at-most-once"), "kafka.retries", "3"), "property 'kafka.retries'"},
      {"kafka-sink", with(sink, "topics", "a"), "unknown property 'topics'"},
      {"kafka-queue", source, "unknown connector 'kafka-queue'; expected one of kafka-sink, kafka-source"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Kafka().Validate(c.connector, c.properties);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.expected << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(c.expected));
  }
  EXPECT_TRUE(Kafka().Validate("kafka-source", source).ok());
  EXPECT_TRUE(Kafka().Validate("kafka-sink", sink).ok());
  EXPECT_THAT(Kafka().CreateSource("kafka-sink", sink, {}).status().message(),
              HasSubstr("connector 'kafka-sink' is a sink, not a source"));
  EXPECT_THAT(Kafka().CreateSink("kafka-source", source).status().message(),
              HasSubstr("connector 'kafka-source' is a source, not a sink"));
}

}  // namespace
}  // namespace weir::connectors
