// How much memory the Kafka clients of a TaskManager may buffer, and the
// librdkafka properties that keep them within it.
//
// librdkafka's defaults are sized for a process that runs one client: a
// consumer prefetches up to 64 MiB (queued.max.messages.kbytes) or 100 000
// records per partition (queued.min.messages) in fetches of up to 50 MB
// (fetch.max.bytes), a producer queues up to 1 GiB or 100 000 records
// (queue.buffering.max.*) in batches of up to 1 MB (batch.size). A
// TaskManager runs a consumer per Kafka source subtask and one or more
// producers per Kafka sink subtask, so Weir derives these properties from
// the TaskManager's budget `taskmanager.memory.task.off-heap.size`: it is
// divided evenly among the slots (taskmanager.numberOfTaskSlots), and a
// slot's share evenly between the Kafka source subtask and the Kafka sink
// subtask it runs (a slot runs one subtask of each of a job's vertices).
// A budget of 0 keeps librdkafka's own defaults.
//
// A property the job sets itself (kafka.<name>) always wins; a derived
// property that librdkafka would refuse beside it, or that could never hold
// one record of the job's size (message.max.bytes), is raised to fit it.
// Combinations of the job's own properties that cannot work are refused by
// CheckConsumerMemoryProperties / CheckProducerMemoryProperties with the
// keys named.
//
// Thread-safety: everything here is immutable or a pure function.
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_MEMORY_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/configuration.h"
#include "connectors/connector.h"

namespace weir::connectors {

// The smallest budget of one Kafka client (a source subtask's consumer or a
// sink subtask's producers): below it librdkafka's minimum fetch and batch
// sizes alone would exceed the budget several times over.
inline constexpr int64_t kMinKafkaClientMemoryBytes = 256 * 1024;

// The memory each Kafka client of a TaskManager may use for buffered
// records. 0 for both: librdkafka's defaults (no budget).
struct KafkaClientMemory {
  // A source subtask's consumer: prefetched records and fetch responses.
  int64_t consumer_bytes = 0;
  // A sink subtask's producer: queued records and the batches in flight.
  // The exactly-once sink's producers hold records one after the other
  // (each transaction is flushed before the next producer writes), so each
  // of them gets this budget.
  int64_t producer_bytes = 0;

  bool unlimited() const { return consumer_bytes == 0 && producer_bytes == 0; }

  // Divides `budget_bytes` (the TaskManager's) among `slots` slots, and a
  // slot's share between its source and its sink. kInvalidArgument naming
  // both keys when a client's share is below kMinKafkaClientMemoryBytes.
  static absl::StatusOr<KafkaClientMemory> Divide(int64_t budget_bytes, int64_t slots);
  // Divide() of taskmanager.memory.task.off-heap.size and
  // taskmanager.numberOfTaskSlots in `config`.
  static absl::StatusOr<KafkaClientMemory> FromConfig(const config::Configuration& config);
};

// The librdkafka properties that size a consumer within `budget_bytes`
// (queued.max.messages.kbytes, queued.min.messages, fetch.max.bytes,
// max.partition.fetch.bytes), leaving out every one that `job_properties`
// (the job's kafka.* extras, without the prefix) sets or that it sets
// through an alias. Empty for a budget of 0. kInvalidArgument as
// CheckConsumerMemoryProperties for the job's properties.
absl::StatusOr<Properties> ConsumerMemoryProperties(int64_t budget_bytes, const Properties& job_properties);

// The same for a producer within `budget_bytes`: queue.buffering.max.kbytes,
// queue.buffering.max.messages, batch.size and batch.num.messages (an
// eighth of the queue each, so that batches fill before the queue does).
absl::StatusOr<Properties> ProducerMemoryProperties(int64_t budget_bytes, const Properties& job_properties);

// Checks the sizing properties a job sets on a Kafka source (without the
// "kafka." prefix) against each other and librdkafka's defaults: refuses
// fetch.max.bytes below message.max.bytes, receive.message.max.bytes below
// fetch.max.bytes + 512 (librdkafka refuses both), and the two names of the
// per-partition fetch size with different values. `connector` prefixes the
// message, which names the keys.
absl::Status CheckConsumerMemoryProperties(absl::string_view connector, const Properties& job_properties);

// Checks a Kafka sink's sizing properties: refuses a queue
// (queue.buffering.max.kbytes) smaller than the largest record
// (message.max.bytes), which would never fit and stall the sink.
absl::Status CheckProducerMemoryProperties(absl::string_view connector, const Properties& job_properties);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_MEMORY_H_
