#include "connectors/builtin.h"

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_memory.h"
#include "connectors/kafka/kafka_properties.h"
#include "connectors/mysql/mysql_sink.h"
#include "connectors/postgres/postgres_sink.h"
#include "connectors/redis/redis_sink.h"

namespace weir::connectors {

ConnectorRegistry BuiltinConnectors(const config::Configuration& cluster) {
  namespace k = config::keys;
  ConnectorRegistry registry;
  // A TaskManager refuses to start with a budget that does not divide
  // (KafkaClientMemory::FromConfig); a JobManager creates no client.
  const KafkaClientMemory memory = KafkaClientMemory::FromConfig(cluster).value_or(KafkaClientMemory{});
  const absl::Status kafka = RegisterKafkaConnectors(
      &registry, KafkaPropertyPolicy::FromList(cluster.GetString(k::kKafkaAllowedProperties)), memory);
  // Only a clash of built-in names can fail: a programming error.
  WEIR_CHECK(kafka.ok(), kafka.ToString());
  const absl::Status redis = registry.Register(kRedisSinkConnector, std::make_unique<RedisSinkConnector>());
  WEIR_CHECK(redis.ok(), redis.ToString());
  const absl::Status postgres = registry.Register(kPostgresSinkConnector, std::make_unique<PostgresSinkConnector>());
  WEIR_CHECK(postgres.ok(), postgres.ToString());
  const absl::Status mysql = registry.Register(kMySqlSinkConnector, std::make_unique<MySqlSinkConnector>());
  WEIR_CHECK(mysql.ok(), mysql.ToString());
  return registry;
}

absl::StatusOr<std::string> DescribeConnectorMemory(const config::Configuration& cluster) {
  namespace k = config::keys;
  ASSIGN_OR_RETURN(const KafkaClientMemory memory, KafkaClientMemory::FromConfig(cluster));
  if (memory.unlimited()) {
    return absl::StrCat("Kafka clients keep librdkafka's own buffer sizes (", k::kTaskOffHeapSize, " = 0)");
  }
  const int64_t slots = cluster.GetInt(k::kTaskManagerSlots);
  const bool grown = !cluster.IsSet(k::kTaskOffHeapSize) &&
                     cluster.GetMemorySize(k::kTaskOffHeapSize) < kMinKafkaClientMemoryBytes * 2 * slots;
  return absl::StrCat("Kafka clients buffer up to ", memory.consumer_bytes, " bytes per source subtask and ",
                      memory.producer_bytes, " bytes per sink producer (", k::kTaskOffHeapSize, " over ",
                      k::kTaskManagerSlots, " = ", slots,
                      grown ? absl::StrCat("; the default raised to ", kMinKafkaClientMemoryBytes * 2 * slots,
                                           " bytes, the least for that many slots")
                            : "",
                      ")");
}

}  // namespace weir::connectors
