// The connectors every Weir cluster has: "kafka-source" and "kafka-sink"
// (connectors/kafka/kafka_connectors.h). The daemons build their registry
// here; nothing else in the runtime names a built-in connector.
//
// Thread-safety: BuiltinConnectors is a pure function of `cluster`.
#ifndef WEIR_CONNECTORS_BUILTIN_H_
#define WEIR_CONNECTORS_BUILTIN_H_

#include "absl/status/status.h"
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

// Whether the connectors' memory settings of `cluster` work together (a
// TaskManager checks this at start): kInvalidArgument naming the keys.
absl::Status CheckConnectorMemory(const config::Configuration& cluster);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_BUILTIN_H_
