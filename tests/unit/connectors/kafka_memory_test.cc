// The Kafka clients' memory budget: how taskmanager.memory.task.off-heap.size
// divides among slots and clients, which librdkafka properties follow from a
// client's share (and that librdkafka accepts them together), that a job's
// own kafka.* properties win, and which combinations are refused.
#include "connectors/kafka/kafka_memory.h"

#include <librdkafka/rdkafkacpp.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "common/config/configuration.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weir::connectors {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Key;
using ::testing::Not;
using ::testing::Contains;

constexpr int64_t kMiB = 1024 * 1024;

int64_t Int(const Properties& properties, const std::string& name) {
  int64_t value = -1;
  auto it = properties.find(name);
  EXPECT_NE(it, properties.end()) << name;
  if (it != properties.end()) {
    EXPECT_TRUE(absl::SimpleAtoi(it->second, &value)) << it->second;
  }
  return value;
}

// Creates a librdkafka client with `properties` (no broker is contacted):
// "" when librdkafka accepts the combination, else its error.
std::string LibrdkafkaRefusal(const Properties& properties, bool consumer) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string error;
  Properties all = properties;
  all["bootstrap.servers"] = "127.0.0.1:9";
  all["log_level"] = "0";  // no broker there: keep its complaints off the test log
  if (consumer) all["group.id"] = "kafka-memory-test";
  for (const auto& [name, value] : all) {
    if (conf->set(name, value, error) != RdKafka::Conf::CONF_OK) return name + ": " + error;
  }
  if (consumer) {
    std::unique_ptr<RdKafka::KafkaConsumer> client(RdKafka::KafkaConsumer::create(conf.get(), error));
    if (!client) return error;
    client->close();
    return "";
  }
  std::unique_ptr<RdKafka::Producer> client(RdKafka::Producer::create(conf.get(), error));
  return client ? "" : error;
}

TEST(KafkaMemoryTest, BudgetIsDividedAmongSlotsAndBetweenSourceAndSink) {
  auto memory = KafkaClientMemory::Divide(8 * kMiB, 2);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->consumer_bytes, 2 * kMiB);
  EXPECT_EQ(memory->producer_bytes, 2 * kMiB);
  EXPECT_FALSE(memory->unlimited());

  auto none = KafkaClientMemory::Divide(0, 4);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->unlimited());
}

TEST(KafkaMemoryTest, ConfigurationKeysAndTheirDefault) {
  config::Configuration defaults;
  auto memory = KafkaClientMemory::FromConfig(defaults);
  ASSERT_TRUE(memory.ok()) << memory.status();
  // 6 MB for the default single slot.
  EXPECT_EQ(memory->consumer_bytes, 3 * kMiB);
  EXPECT_EQ(memory->producer_bytes, 3 * kMiB);

  config::Configuration four_slots;
  ASSERT_TRUE(four_slots.Set("taskmanager.numberOfTaskSlots", "4", config::ValueSource::kCommandLine).ok());
  ASSERT_TRUE(four_slots.Set("taskmanager.memory.task.off-heap.size", "16 mb", config::ValueSource::kCommandLine)
                  .ok());
  memory = KafkaClientMemory::FromConfig(four_slots);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->consumer_bytes, 2 * kMiB);
}

// The default budget does not stop a TaskManager of many slots from
// starting: it grows to the smallest share each client works with. A
// budget set on purpose is taken as it is (and refused when too small).
TEST(KafkaMemoryTest, TheDefaultBudgetGrowsWithManySlots) {
  config::Configuration many_slots;
  ASSERT_TRUE(many_slots.Set("taskmanager.numberOfTaskSlots", "21", config::ValueSource::kCommandLine).ok());
  auto memory = KafkaClientMemory::FromConfig(many_slots);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ(memory->consumer_bytes, kMinKafkaClientMemoryBytes);
  EXPECT_EQ(memory->producer_bytes, kMinKafkaClientMemoryBytes);

  ASSERT_TRUE(many_slots.Set("taskmanager.memory.task.off-heap.size", "8 mb", config::ValueSource::kFile).ok());
  EXPECT_EQ(KafkaClientMemory::FromConfig(many_slots).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KafkaMemoryTest, BudgetTooSmallForTheSlotsIsRefusedNamingBothKeys) {
  const absl::Status refused = KafkaClientMemory::Divide(1 * kMiB, 4).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), AllOf(HasSubstr("taskmanager.memory.task.off-heap.size"),
                                       HasSubstr("taskmanager.numberOfTaskSlots"), HasSubstr("2097152")));
  EXPECT_EQ(KafkaClientMemory::Divide(-1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KafkaMemoryTest, NoBudgetKeepsLibrdkafkaDefaults) {
  auto consumer = ConsumerMemoryProperties(0, {});
  ASSERT_TRUE(consumer.ok());
  EXPECT_THAT(*consumer, IsEmpty());
  auto producer = ProducerMemoryProperties(0, {});
  ASSERT_TRUE(producer.ok());
  EXPECT_THAT(*producer, IsEmpty());
}

TEST(KafkaMemoryTest, ConsumerPropertiesFitTheBudgetAndEachOther) {
  for (int64_t budget : {kMinKafkaClientMemoryBytes, 2 * kMiB, 16 * kMiB, 1024 * kMiB}) {
    SCOPED_TRACE(budget);
    auto derived = ConsumerMemoryProperties(budget, {});
    ASSERT_TRUE(derived.ok()) << derived.status();
    const int64_t fetch_max = Int(*derived, "fetch.max.bytes");
    const int64_t partition_fetch = Int(*derived, "max.partition.fetch.bytes");
    const int64_t queued_kbytes = Int(*derived, "queued.max.messages.kbytes");
    const int64_t queued_messages = Int(*derived, "queued.min.messages");
    // librdkafka's floor: a fetch holds at least one record of
    // message.max.bytes (1000000 by default).
    EXPECT_GE(fetch_max, 1000000);
    EXPECT_LE(fetch_max, std::max<int64_t>(budget / 4, 1000000));
    EXPECT_LE(partition_fetch, fetch_max);
    EXPECT_LE(queued_kbytes * 1024, budget / 2);
    EXPECT_GE(queued_messages, 1000);
    EXPECT_LE(queued_messages, std::max<int64_t>(1000, budget / 2 / 256));
    EXPECT_EQ(LibrdkafkaRefusal(*derived, /*consumer=*/true), "");
  }
  // Concretely, for 2 MiB.
  auto two = ConsumerMemoryProperties(2 * kMiB, {});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(Int(*two, "queued.max.messages.kbytes"), 1024);
  EXPECT_EQ(Int(*two, "queued.min.messages"), 4096);
  EXPECT_EQ(Int(*two, "fetch.max.bytes"), 1000000);
  EXPECT_EQ(Int(*two, "max.partition.fetch.bytes"), 1000000);
}

TEST(KafkaMemoryTest, ProducerPropertiesFitTheBudgetAndEachOther) {
  for (int64_t budget : {kMinKafkaClientMemoryBytes, 2 * kMiB, 16 * kMiB, 1024 * kMiB}) {
    SCOPED_TRACE(budget);
    auto derived = ProducerMemoryProperties(budget, {});
    ASSERT_TRUE(derived.ok()) << derived.status();
    const int64_t queue_kbytes = Int(*derived, "queue.buffering.max.kbytes");
    // Never below the largest record (message.max.bytes, 1000000 by default).
    EXPECT_GE(queue_kbytes * 1024, 1000000);
    EXPECT_LE(queue_kbytes * 1024, std::max<int64_t>(budget / 2, 1000000) + 1023);
    EXPECT_GE(Int(*derived, "queue.buffering.max.messages"), 1000);
    EXPECT_LE(Int(*derived, "batch.size"), 1000000);
    EXPECT_GE(Int(*derived, "batch.size"), 16 * 1024);
    // Batches fill before the queue does (for up to 8 partitions).
    EXPECT_LE(Int(*derived, "batch.size") * 8, std::max<int64_t>(queue_kbytes * 1024, 8 * 16 * 1024));
    EXPECT_LE(Int(*derived, "batch.num.messages") * 8, Int(*derived, "queue.buffering.max.messages"));
    EXPECT_EQ(LibrdkafkaRefusal(*derived, /*consumer=*/false), "");
  }
  auto two = ProducerMemoryProperties(2 * kMiB, {});
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(Int(*two, "queue.buffering.max.kbytes"), 1024);
  EXPECT_EQ(Int(*two, "queue.buffering.max.messages"), 4096);
  EXPECT_EQ(Int(*two, "batch.size"), 131072);
  EXPECT_EQ(Int(*two, "batch.num.messages"), 512);
}

TEST(KafkaMemoryTest, TheJobsOwnPropertiesWin) {
  // A property the job sets is not derived, nor its alias.
  auto consumer = ConsumerMemoryProperties(
      2 * kMiB, {{"queued.max.messages.kbytes", "65536"}, {"fetch.message.max.bytes", "2000000"}});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  EXPECT_THAT(*consumer, Not(Contains(Key("queued.max.messages.kbytes"))));
  EXPECT_THAT(*consumer, Not(Contains(Key("max.partition.fetch.bytes"))));
  EXPECT_THAT(*consumer, Not(Contains(Key("fetch.message.max.bytes"))));
  EXPECT_THAT(*consumer, Contains(Key("queued.min.messages")));

  // A derived size that librdkafka would refuse beside the job's larger
  // records is raised to fit them.
  consumer = ConsumerMemoryProperties(2 * kMiB, {{"message.max.bytes", "5000000"}});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  EXPECT_EQ(Int(*consumer, "fetch.max.bytes"), 5000000);
  Properties with_job = *consumer;
  with_job["message.max.bytes"] = "5000000";
  EXPECT_EQ(LibrdkafkaRefusal(with_job, /*consumer=*/true), "");

  // The job's fetch.max.bytes bounds the derived per-partition fetch.
  consumer = ConsumerMemoryProperties(16 * kMiB, {{"fetch.max.bytes", "1000000"}});
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  EXPECT_THAT(*consumer, Not(Contains(Key("fetch.max.bytes"))));
  EXPECT_EQ(Int(*consumer, "max.partition.fetch.bytes"), 1000000);

  auto producer = ProducerMemoryProperties(2 * kMiB, {{"message.max.bytes", "5000000"}, {"batch.size", "65536"}});
  ASSERT_TRUE(producer.ok()) << producer.status();
  EXPECT_GE(Int(*producer, "queue.buffering.max.kbytes") * 1024, 5000000);
  EXPECT_THAT(*producer, Not(Contains(Key("batch.size"))));
  producer = ProducerMemoryProperties(2 * kMiB, {{"queue.buffering.max.kbytes", "1048576"}});
  ASSERT_TRUE(producer.ok()) << producer.status();
  EXPECT_THAT(*producer, Not(Contains(Key("queue.buffering.max.kbytes"))));
}

TEST(KafkaMemoryTest, CombinationsThatCannotWorkAreRefusedNamingTheKeys) {
  // librdkafka refuses a fetch smaller than its largest record.
  absl::Status refused = CheckConsumerMemoryProperties("kafka-source", {{"fetch.max.bytes", "500000"}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), AllOf(HasSubstr("kafka.fetch.max.bytes (500000)"), HasSubstr("message.max.bytes"),
                                       HasSubstr("1000000")));
  EXPECT_NE(LibrdkafkaRefusal({{"fetch.max.bytes", "500000"}}, /*consumer=*/true), "");

  refused = CheckConsumerMemoryProperties("kafka-source",
                                          {{"fetch.max.bytes", "2000000"}, {"receive.message.max.bytes", "2000000"}});
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("kafka.receive.message.max.bytes (2000000)"), HasSubstr("kafka.fetch.max.bytes")));
  EXPECT_NE(LibrdkafkaRefusal({{"fetch.max.bytes", "2000000"}, {"receive.message.max.bytes", "2000000"}},
                              /*consumer=*/true),
            "");

  refused = CheckConsumerMemoryProperties(
      "kafka-source", {{"max.partition.fetch.bytes", "100000"}, {"fetch.message.max.bytes", "200000"}});
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("kafka.max.partition.fetch.bytes"), HasSubstr("kafka.fetch.message.max.bytes")));

  // A producer queue smaller than a record would stall the sink forever.
  refused = CheckProducerMemoryProperties("kafka-sink", {{"queue.buffering.max.kbytes", "512"}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("kafka.queue.buffering.max.kbytes (512 KiB)"), HasSubstr("message.max.bytes")));
  EXPECT_TRUE(CheckProducerMemoryProperties(
                  "kafka-sink", {{"queue.buffering.max.kbytes", "512"}, {"message.max.bytes", "100000"}})
                  .ok());

  // Submission refuses them (the JobManager runs FromProperties).
  auto source = KafkaSourceConfig::FromProperties(
      {{"brokers", "127.0.0.1:9"}, {"topics", "in"}, {"kafka.fetch.max.bytes", "500000"}});
  EXPECT_THAT(source.status().message(), HasSubstr("kafka-source: kafka.fetch.max.bytes"));
  auto sink = KafkaSinkConfig::FromProperties(
      {{"brokers", "127.0.0.1:9"}, {"topic", "out"}, {"kafka.queue.buffering.max.kbytes", "100"}});
  EXPECT_THAT(sink.status().message(), HasSubstr("kafka-sink: kafka.queue.buffering.max.kbytes"));
}

}  // namespace
}  // namespace weir::connectors
