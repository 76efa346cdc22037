// The connectors every Weir cluster has: "kafka-source" and "kafka-sink"
// (connectors/kafka/kafka_connectors.h). The daemons build their registry
// here; nothing else in the runtime names a built-in connector.
//
// Thread-safety: BuiltinConnectors is a pure function of `cluster`.
#ifndef WEIR_CONNECTORS_BUILTIN_H_
#define WEIR_CONNECTORS_BUILTIN_H_

#include "common/config/configuration.h"
#include "connectors/registry.h"

namespace weir::connectors {

// The built-in connectors, configured from the cluster's configuration:
// the Kafka connectors allow the extra kafka.<name> properties of
// security.kafka.allowed-properties.
ConnectorRegistry BuiltinConnectors(const config::Configuration& cluster);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_BUILTIN_H_
