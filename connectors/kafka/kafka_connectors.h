// The Kafka connectors as the runtime sees them (connectors/connector.h):
// "kafka-source" and "kafka-sink", registered by RegisterKafkaConnectors.
//
// Properties are the strings weir::kafka::Source / weir::kafka::Sink
// (api/weir/kafka.h) put into a vertex:
//   kafka-source: brokers, topics (comma-joined), start, group.id,
//                 isolation.level, bounded, kafka.<librdkafka property>...
//   kafka-sink:   brokers, topic, guarantee, transactional.id.prefix,
//                 kafka.<librdkafka property>...
// kafka.<name> extras must be allowed by JobSettableKafkaProperties() or the
// connector's KafkaPropertyPolicy (kafka_properties.h).
//
// Thread-safety: the connectors are immutable; every method is safe to call
// from any thread. RegisterKafkaConnectors is for building a registry
// (connectors/registry.h says when).
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_CONNECTORS_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_CONNECTORS_H_

#include <memory>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/connector.h"
#include "connectors/kafka/kafka_memory.h"
#include "connectors/kafka/kafka_properties.h"
#include "connectors/registry.h"
#include "weir/operator.h"

namespace weir::connectors {

inline constexpr char kKafkaSourceConnector[] = "kafka-source";
inline constexpr char kKafkaSinkConnector[] = "kafka-sink";

// "kafka-source": a KafkaSource (kafka_source.h).
class KafkaSourceConnector final : public Connector {
 public:
  // `memory`: what the consumer of each source subtask may buffer.
  explicit KafkaSourceConnector(KafkaPropertyPolicy policy = {}, KafkaClientMemory memory = {})
      : policy_(std::move(policy)), memory_(memory) {}

  Kind kind() const override { return Kind::kSource; }
  // KafkaSourceConfig::FromProperties: kInvalidArgument naming the property.
  absl::Status Validate(const Properties& properties) const override;
  // A job whose sinks are all at-most-once reads at-most-once (see
  // KafkaSourceConfig::at_most_once) unless the property 'at-most-once'
  // says otherwise.
  absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(const Properties& properties,
                                                                     const SourceContext& context) const override;

 private:
  const KafkaPropertyPolicy policy_;
  const KafkaClientMemory memory_;
};

// "kafka-sink": a KafkaSink, or a KafkaTransactionalSink for guarantee
// exactly-once (kafka_sink.h, kafka_transactional_sink.h).
class KafkaSinkConnector final : public Connector {
 public:
  // `memory`: what each producer of a sink subtask may buffer.
  explicit KafkaSinkConnector(KafkaPropertyPolicy policy = {}, KafkaClientMemory memory = {})
      : policy_(std::move(policy)), memory_(memory) {}

  Kind kind() const override { return Kind::kSink; }
  // KafkaSinkConfig::FromProperties: kInvalidArgument naming the property;
  // kUnimplemented for exactly-once over TLS/SASL.
  absl::Status Validate(const Properties& properties) const override;
  // Exactly-once with checkpoints on: kFailedPrecondition unless
  // kafka.transaction.timeout.ms exceeds the checkpoint interval plus its
  // timeout (a pre-committed transaction stays open that long, and the
  // broker would abort it).
  absl::Status ValidateForJob(const Properties& properties, const JobCheckpointing& checkpointing) const override;
  // Exactly-once: the transactional id prefix.
  std::optional<ExclusiveNameClaim> ExclusiveName(const Properties& properties) const override;
  absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const Properties& properties) const override;

 private:
  const KafkaPropertyPolicy policy_;
  const KafkaClientMemory memory_;
};

// Registers "kafka-source" and "kafka-sink" with `policy` and the clients'
// `memory`; kAlreadyExists when `registry` has either name.
absl::Status RegisterKafkaConnectors(ConnectorRegistry* registry, KafkaPropertyPolicy policy = {},
                                     KafkaClientMemory memory = {});

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_CONNECTORS_H_
