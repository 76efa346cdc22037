// The connectors every Weir cluster has: "kafka-source" and "kafka-sink"
// (connectors/kafka/kafka_connectors.h). The daemons build their registry
// here; nothing else in the runtime names a built-in connector.
//
// Thread-safety: BuiltinConnectors is a pure function of `cluster`.
#ifndef WEIR_CONNECTORS_BUILTIN_H_
#define WEIR_CONNECTORS_BUILTIN_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/config/configuration.h"
#include "connectors/registry.h"

namespace weir::connectors {

// The built-in connectors, configured from the cluster's configuration:
// the Kafka connectors allow the extra kafka.<name> properties of
// security.kafka.allowed-properties and size their clients' buffers from
// taskmanager.memory.task.off-heap.size (connectors/kafka/kafka_memory.h;
// librdkafka's defaults when that does not divide among the slots, which
// CheckConnectorMemory reports).
ConnectorRegistry BuiltinConnectors(const config::Configuration& cluster);

// What the connectors' clients may buffer under `cluster`'s settings, for
// the TaskManager's start-up log ("Kafka clients buffer up to ..."), or
// kInvalidArgument naming the keys when the settings do not work together
// (a TaskManager then refuses to start).
absl::StatusOr<std::string> DescribeConnectorMemory(const config::Configuration& cluster);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_BUILTIN_H_
