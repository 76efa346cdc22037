#include "connectors/kafka/kafka_connectors.h"

#include <cstdint>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/kafka/shared_idleness.h"

namespace weir::connectors {

absl::Status KafkaSourceConnector::Validate(const Properties& properties) const {
  return KafkaSourceConfig::FromProperties(properties, policy_).status();
}

absl::StatusOr<std::unique_ptr<weir::SourceOperator>> KafkaSourceConnector::CreateSource(
    const Properties& properties, const SourceContext& context) const {
  ASSIGN_OR_RETURN(KafkaSourceConfig config, KafkaSourceConfig::FromProperties(properties, policy_));
  if (context.job_at_most_once && !properties.contains("at-most-once")) config.at_most_once = true;
  if (config.event_time.has_value()) {
    config.event_time->stall_warning_ms = context.event_time_stall_warning_ms;
    if (!context.job_id.empty() && !context.operator_id.empty()) {
      config.event_time->shared_idleness_group = kafka_internal::BoardGroupId(context.job_id, context.operator_id);
    }
  }
  if (config.event_time.has_value() && config.event_time->extractor) {
    if (!context.timestamp_extractor) {
      return absl::InvalidArgumentError(
          "kafka-source: property 'watermark.timestamps' is 'extractor' but the job gave no extractor; build the "
          "source with kafka::Source and a WatermarkStrategy whose timestamp is set");
    }
    config.timestamp_extractor = context.timestamp_extractor;
  }
  ASSIGN_OR_RETURN(config.memory_properties,
                   ConsumerMemoryProperties(memory_.consumer_bytes, config.kafka_properties));
  return std::make_unique<KafkaSource>(std::move(config));
}

absl::Status KafkaSinkConnector::Validate(const Properties& properties) const {
  return KafkaSinkConfig::FromProperties(properties, policy_).status();
}

absl::Status KafkaSinkConnector::ValidateForJob(const Properties& properties,
                                                const JobCheckpointing& checkpointing) const {
  ASSIGN_OR_RETURN(KafkaSinkConfig config, KafkaSinkConfig::FromProperties(properties, policy_));
  if (config.guarantee != kafka::Guarantee::kExactlyOnce || !checkpointing.enabled) return absl::OkStatus();
  // A transaction is open from the first record after a barrier until the
  // next checkpoint completes and it is committed — after a failure, until
  // the restarted job commits it from the checkpoint: up to an interval, a
  // checkpoint's timeout and the wait before a restart. The broker must not
  // abort it before.
  int64_t timeout_ms = kDefaultTransactionTimeoutMs;
  if (auto t = config.kafka_properties.find("transaction.timeout.ms"); t != config.kafka_properties.end()) {
    if (!absl::SimpleAtoi(t->second, &timeout_ms)) {
      return absl::InvalidArgumentError(absl::StrCat(kKafkaSinkConnector, ": property 'kafka.transaction.timeout.ms' is '",
                                                     t->second, "'; expected milliseconds"));
    }
  }
  const absl::Duration needed = checkpointing.interval + checkpointing.timeout + checkpointing.restart_delay;
  if (absl::Milliseconds(timeout_ms) <= needed) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kafka.transaction.timeout.ms is ", timeout_ms, " ms, but a transaction can stay open for "
        "execution.checkpointing.interval + execution.checkpointing.timeout + the longest restart delay "
        "(restart-strategy.fixed-delay.delay or restart-strategy.exponential-delay.max-backoff) = ",
        absl::ToInt64Milliseconds(needed),
        " ms before it is committed, and the broker would abort it (losing its records); raise "
        "kafka.transaction.timeout.ms (at most the broker's transaction.max.timeout.ms, 15 min by default) or "
        "lower execution.checkpointing.timeout or the restart delay"));
  }
  return absl::OkStatus();
}

std::optional<ExclusiveNameClaim> KafkaSinkConnector::ExclusiveName(const Properties& properties) const {
  const std::string prefix = PropertyOr(properties, "transactional.id.prefix");
  if (!WritesExactlyOnce(properties) || prefix.empty()) return std::nullopt;
  return ExclusiveNameClaim{.name = prefix,
                            .what = "transactional id prefix",
                            .use = "writes exactly-once with",
                            .conflict = "abort each other's transactions",
                            .setting = "transactional_id_prefix"};
}

absl::StatusOr<std::unique_ptr<weir::StreamOperator>> KafkaSinkConnector::CreateSink(
    const Properties& properties) const {
  ASSIGN_OR_RETURN(KafkaSinkConfig config, KafkaSinkConfig::FromProperties(properties, policy_));
  ASSIGN_OR_RETURN(config.memory_properties,
                   ProducerMemoryProperties(memory_.producer_bytes, config.kafka_properties));
  if (config.guarantee == kafka::Guarantee::kExactlyOnce) {
    return std::make_unique<KafkaTransactionalSink>(std::move(config));
  }
  return std::make_unique<KafkaSink>(std::move(config));
}

absl::Status RegisterKafkaConnectors(ConnectorRegistry* registry, KafkaPropertyPolicy policy,
                                     KafkaClientMemory memory) {
  RETURN_IF_ERROR(registry->Register(kKafkaSourceConnector, std::make_unique<KafkaSourceConnector>(policy, memory)));
  return registry->Register(kKafkaSinkConnector, std::make_unique<KafkaSinkConnector>(std::move(policy), memory));
}

}  // namespace weir::connectors
