#include "connectors/kafka/kafka_memory.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config/options.h"
#include "common/status_macros.h"

namespace weir::connectors {
namespace {

// librdkafka 2.0.2's defaults that the derivation depends on.
constexpr int64_t kDefaultMessageMaxBytes = 1000000;
constexpr int64_t kDefaultPartitionFetchBytes = 1024 * 1024;
constexpr int64_t kDefaultFetchMaxBytes = 50 * 1024 * 1024;
constexpr int64_t kDefaultBatchSize = 1000000;
// librdkafka's upper bounds of queued.max.messages.kbytes and
// queued.min.messages.
constexpr int64_t kMaxQueuedKbytes = 2097151;
constexpr int64_t kMaxQueuedMessages = 10000000;
constexpr int64_t kInt32Max = 2147483647;
// librdkafka's framing room between a fetch and the largest response.
constexpr int64_t kResponseFramingBytes = 512;
// What a buffered record costs librdkafka beyond its bytes (its message and
// queue bookkeeping), measured for small records; it turns a byte budget
// into a record count for queued.min.messages and
// queue.buffering.max.messages, which count records, not bytes.
constexpr int64_t kBytesPerBufferedRecord = 256;
constexpr int64_t kMinBufferedRecords = 1000;
constexpr int64_t kMinBatchBytes = 16 * 1024;
constexpr int64_t kDefaultBatchMessages = 10000;
constexpr int64_t kBatchesPerQueue = 8;

// The job's value of `name` as an integer, if it sets one. Values were
// checked against their ranges before (kafka_properties.cc).
std::optional<int64_t> JobInt(const Properties& job, const std::string& name) {
  auto it = job.find(name);
  int64_t value = 0;
  if (it == job.end() || !absl::SimpleAtoi(it->second, &value)) return std::nullopt;
  return value;
}

bool Sets(const Properties& job, const std::string& name) { return job.contains(name); }

int64_t MessageMaxBytes(const Properties& job) {
  return JobInt(job, "message.max.bytes").value_or(kDefaultMessageMaxBytes);
}

std::string MessageMaxText(const Properties& job) {
  return Sets(job, "message.max.bytes") ? absl::StrCat("kafka.message.max.bytes (", MessageMaxBytes(job), ")")
                                        : absl::StrCat("message.max.bytes (librdkafka's default ",
                                                       kDefaultMessageMaxBytes, ")");
}

}  // namespace

absl::StatusOr<KafkaClientMemory> KafkaClientMemory::Divide(int64_t budget_bytes, int64_t slots) {
  namespace k = config::keys;
  if (budget_bytes < 0 || slots < 1) {
    return absl::InvalidArgumentError(absl::StrCat(k::kTaskOffHeapSize, " (", budget_bytes, " bytes) and ",
                                                   k::kTaskManagerSlots, " (", slots,
                                                   ") must be at least 0 and 1"));
  }
  if (budget_bytes == 0) return KafkaClientMemory{};
  // Each slot runs a source subtask and a sink subtask.
  const int64_t per_client = budget_bytes / slots / 2;
  if (per_client < kMinKafkaClientMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        k::kTaskOffHeapSize, " is ", budget_bytes, " bytes, which leaves ", per_client,
        " bytes to each Kafka client with ", k::kTaskManagerSlots, " = ", slots,
        " (a slot's share is split between its Kafka source and its Kafka sink); a client needs at least ",
        kMinKafkaClientMemoryBytes, " bytes: raise ", k::kTaskOffHeapSize, " to at least ",
        kMinKafkaClientMemoryBytes * 2 * slots, " bytes, lower ", k::kTaskManagerSlots,
        ", or set it to 0 to keep librdkafka's own buffer sizes"));
  }
  return KafkaClientMemory{.consumer_bytes = per_client, .producer_bytes = per_client};
}

absl::StatusOr<KafkaClientMemory> KafkaClientMemory::FromConfig(const config::Configuration& config) {
  namespace k = config::keys;
  const int64_t slots = config.GetInt(k::kTaskManagerSlots);
  int64_t budget = config.GetMemorySize(k::kTaskOffHeapSize);
  // The default budget grows with the slots to the smallest share a client
  // works with; only a budget set on purpose is refused as too small.
  if (!config.IsSet(k::kTaskOffHeapSize)) budget = std::max(budget, kMinKafkaClientMemoryBytes * 2 * slots);
  return Divide(budget, slots);
}

absl::Status CheckConsumerMemoryProperties(absl::string_view connector, const Properties& job) {
  const auto partition_fetch = JobInt(job, "max.partition.fetch.bytes");
  const auto message_fetch = JobInt(job, "fetch.message.max.bytes");
  if (partition_fetch && message_fetch && *partition_fetch != *message_fetch) {
    return absl::InvalidArgumentError(absl::StrCat(
        connector, ": kafka.max.partition.fetch.bytes (", *partition_fetch, ") and kafka.fetch.message.max.bytes (",
        *message_fetch, ") are two names of one librdkafka property; set one of them"));
  }
  const int64_t message_max = MessageMaxBytes(job);
  const auto fetch_max = JobInt(job, "fetch.max.bytes");
  if (fetch_max && *fetch_max < message_max) {
    return absl::InvalidArgumentError(absl::StrCat(connector, ": kafka.fetch.max.bytes (", *fetch_max,
                                                   ") is smaller than ", MessageMaxText(job),
                                                   "; librdkafka refuses that: raise kafka.fetch.max.bytes or "
                                                   "lower kafka.message.max.bytes"));
  }
  if (const auto receive_max = JobInt(job, "receive.message.max.bytes")) {
    const int64_t fetch = fetch_max.value_or(message_max);
    if (*receive_max < fetch + kResponseFramingBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          connector, ": kafka.receive.message.max.bytes (", *receive_max, ") is smaller than ",
          fetch_max ? absl::StrCat("kafka.fetch.max.bytes (", *fetch_max, ")") : MessageMaxText(job), " + ",
          kResponseFramingBytes, "; librdkafka refuses that: raise kafka.receive.message.max.bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckProducerMemoryProperties(absl::string_view connector, const Properties& job) {
  if (const auto queue_kbytes = JobInt(job, "queue.buffering.max.kbytes")) {
    const int64_t message_max = MessageMaxBytes(job);
    if (*queue_kbytes * 1024 < message_max) {
      return absl::InvalidArgumentError(absl::StrCat(
          connector, ": kafka.queue.buffering.max.kbytes (", *queue_kbytes, " KiB) is smaller than ",
          MessageMaxText(job), ": a record of the largest size would never fit the producer's queue and the "
          "sink would stall; raise kafka.queue.buffering.max.kbytes or lower kafka.message.max.bytes"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Properties> ConsumerMemoryProperties(int64_t budget_bytes, const Properties& job) {
  RETURN_IF_ERROR(CheckConsumerMemoryProperties("kafka-source", job));
  Properties derived;
  if (budget_bytes <= 0) return derived;
  const int64_t message_max = MessageMaxBytes(job);
  // A quarter for the fetch response being received, half for the records
  // prefetched; the rest is librdkafka's bookkeeping of them.
  int64_t fetch_max = std::max(message_max, std::min(budget_bytes / 4, kDefaultFetchMaxBytes));
  if (const auto receive_max = JobInt(job, "receive.message.max.bytes")) {
    fetch_max = std::max(message_max, std::min(fetch_max, *receive_max - kResponseFramingBytes));
  }
  if (const auto job_fetch_max = JobInt(job, "fetch.max.bytes")) {
    fetch_max = *job_fetch_max;
  } else {
    derived["fetch.max.bytes"] = absl::StrCat(fetch_max);
  }
  if (!Sets(job, "max.partition.fetch.bytes") && !Sets(job, "fetch.message.max.bytes")) {
    derived["max.partition.fetch.bytes"] = absl::StrCat(std::min(fetch_max, kDefaultPartitionFetchBytes));
  }
  const int64_t queue_bytes = budget_bytes / 2;
  if (!Sets(job, "queued.max.messages.kbytes")) {
    derived["queued.max.messages.kbytes"] = absl::StrCat(std::clamp<int64_t>(queue_bytes / 1024, 1, kMaxQueuedKbytes));
  }
  if (!Sets(job, "queued.min.messages")) {
    derived["queued.min.messages"] =
        absl::StrCat(std::clamp(queue_bytes / kBytesPerBufferedRecord, kMinBufferedRecords, kMaxQueuedMessages));
  }
  return derived;
}

absl::StatusOr<Properties> ProducerMemoryProperties(int64_t budget_bytes, const Properties& job) {
  RETURN_IF_ERROR(CheckProducerMemoryProperties("kafka-sink", job));
  Properties derived;
  if (budget_bytes <= 0) return derived;
  const int64_t message_max = MessageMaxBytes(job);
  // Half for the queued records; the batches in flight copy them once more.
  const int64_t queue_bytes = budget_bytes / 2;
  if (!Sets(job, "queue.buffering.max.kbytes")) {
    // Never below the largest record, which would otherwise never fit.
    const int64_t bytes = std::max(queue_bytes, message_max);
    derived["queue.buffering.max.kbytes"] = absl::StrCat(std::min<int64_t>((bytes + 1023) / 1024, kInt32Max));
  }
  const int64_t queue_messages =
      JobInt(job, "queue.buffering.max.messages")
          .value_or(std::clamp(queue_bytes / kBytesPerBufferedRecord, kMinBufferedRecords, kInt32Max));
  if (!Sets(job, "queue.buffering.max.messages")) derived["queue.buffering.max.messages"] = absl::StrCat(queue_messages);
  // A batch is sent when it is full or has lingered linger.ms (100 ms in
  // the exactly-once sink). Batches of an eighth of the queue fill before
  // the queue does for up to 8 partitions; larger ones would leave a full
  // queue waiting for the linger time, the sink blocked.
  if (!Sets(job, "batch.size")) {
    derived["batch.size"] = absl::StrCat(std::clamp(queue_bytes / kBatchesPerQueue, kMinBatchBytes, kDefaultBatchSize));
  }
  if (!Sets(job, "batch.num.messages") && queue_messages > 0) {
    derived["batch.num.messages"] =
        absl::StrCat(std::clamp<int64_t>(queue_messages / kBatchesPerQueue, 1, kDefaultBatchMessages));
  }
  return derived;
}

}  // namespace weir::connectors
