#include "connectors/builtin.h"

#include "common/check.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_properties.h"

namespace weir::connectors {

ConnectorRegistry BuiltinConnectors(const config::Configuration& cluster) {
  namespace k = config::keys;
  ConnectorRegistry registry;
  const absl::Status kafka = RegisterKafkaConnectors(
      &registry, KafkaPropertyPolicy::FromList(cluster.GetString(k::kKafkaAllowedProperties)));
  // Only a clash of built-in names can fail: a programming error.
  WEIR_CHECK(kafka.ok(), kafka.ToString());
  return registry;
}

}  // namespace weir::connectors
