// KafkaSink: the built-in "kafka-sink" connector. Writes weir::kafka::Record
// values to one topic with a librdkafka producer.
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_SINK_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_SINK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/logging/logging.h"
#include "connectors/connector.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_properties.h"
#include "spdlog/logger.h"
#include "weir/kafka.h"
#include "weir/operator.h"

namespace weir::connectors {

// A kafka-sink vertex's properties, parsed and checked.
struct KafkaSinkConfig {
  std::string brokers;
  std::string topic;
  kafka::Guarantee guarantee = kafka::Guarantee::kAtLeastOnce;
  // exactly-once: transactional ids are "<prefix>-<subtask>-<k>"
  // (property 'transactional.id.prefix').
  std::string transactional_id_prefix;
  Properties kafka_properties;  // the kafka.* extras, without the prefix
  // The librdkafka properties that size each producer within the
  // TaskManager's budget (kafka_memory.h); none of them is in
  // kafka_properties. Set by the connector when it creates the sink.
  Properties memory_properties;

  // Parses `properties` (see kafka_connectors.h); kInvalidArgument naming
  // the property that is missing or malformed. Defined in kafka_config.cc
  // with the rest of the property checks.
  static absl::StatusOr<KafkaSinkConfig> FromProperties(const Properties& properties,
                                                           const KafkaPropertyPolicy& policy = {});
};

// Produces every record to the topic, keyed records to the partition Kafka's
// Java producer would choose (partitioner murmur2_random unless
// kafka.partitioner says otherwise), with the record's timestamp when it has
// one (>= 1; 0 and -1 mean the producer's clock).
//
// at-least-once: acks=all with the idempotent producer; the first failed
// delivery makes the next Process or EndInput throw, and EndInput returns only
// once every record is acknowledged. at-most-once: acks=1 and no retries, so
// nothing is written twice; failed deliveries are counted and logged (rate
// limited) but do not fail the task.
//
// A full producer queue blocks Process (serving delivery reports) until
// there is room: that is the sink's backpressure.
//
// Thread-safety: one task thread calls every method (weir/operator.h); the
// delivery reports run on that thread, inside Process/EndInput/Close.
class KafkaSink : public weir::StreamOperator {
 public:
  explicit KafkaSink(KafkaSinkConfig config);
  ~KafkaSink() override;

  KafkaSink(const KafkaSink&) = delete;
  KafkaSink& operator=(const KafkaSink&) = delete;

  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::kafka::Record*.
  void Process(void* record) override;
  void EndInput() override;
  // Waits until every record written so far is acknowledged (at-least-once).
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void Close() override;

  // Records the brokers acknowledged / that failed (including records
  // dropped by Close) since Open.
  int64_t delivered() const { return delivered_; }
  int64_t failed() const { return failed_; }

 private:
  class DeliveryReports : public RdKafka::DeliveryReportCb {
   public:
    explicit DeliveryReports(KafkaSink* sink) : sink_(sink) {}
    void dr_cb(RdKafka::Message& message) override;

   private:
    KafkaSink* const sink_;
  };

  void OnDelivery(const RdKafka::Message& message);
  // Counts a record that will not be written; at-least-once remembers it as
  // the error to throw.
  void RecordFailure(RdKafka::ErrorCode code, const std::string& reason);
  // Throws the first failure (at-least-once) or a fatal producer error.
  void ThrowIfFailed() const;
  // Flushes until every record is acknowledged; throws on a delivery error
  // or when message.timeout.ms (plus a margin) passes.
  void FlushAll();
  std::string DescribeFailure(RdKafka::ErrorCode code, const std::string& reason) const;
  int64_t MessageTimeoutMs() const;

  const KafkaSinkConfig config_;
  const std::shared_ptr<spdlog::logger> log_;
  std::string client_;  // "KafkaSink 'name' subtask i/p", for messages
  DeliveryReports delivery_reports_{this};
  std::unique_ptr<kafka_internal::ClientEvents> events_;
  std::unique_ptr<RdKafka::Producer> producer_;
  std::unique_ptr<RdKafka::Topic> topic_;  // config_.topic, for producing
  int64_t delivered_ = 0;
  int64_t failed_ = 0;
  std::string first_failure_;  // at-least-once: the error the task fails with
  logging::RateLimiter failure_log_limiter_{std::chrono::seconds(10)};
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_SINK_H_
