// ConnectorRegistry: the connectors a cluster knows, by the name a job graph
// gives them (`VertexSpec::connector`). The JobManager validates submissions
// through it, TaskManagers create their sources and sinks through it; the
// runtime includes no connector's own headers. connectors/builtin.h builds
// the registry of the built-in connectors.
//
// Thread-safety: Register is for building the registry, on one thread,
// before it is shared. After that the registry is immutable (daemons hold a
// std::shared_ptr<const ConnectorRegistry>), and every const method is safe
// to call from any thread, concurrently.
#ifndef WEIR_CONNECTORS_REGISTRY_H_
#define WEIR_CONNECTORS_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/connector.h"
#include "weir/operator.h"

namespace weir::connectors {

class ConnectorRegistry {
 public:
  ConnectorRegistry() = default;
  ConnectorRegistry(ConnectorRegistry&&) = default;
  ConnectorRegistry& operator=(ConnectorRegistry&&) = default;
  ConnectorRegistry(const ConnectorRegistry&) = delete;
  ConnectorRegistry& operator=(const ConnectorRegistry&) = delete;

  // Adds `connector` under `name`. kInvalidArgument for an empty name or a
  // null connector, kAlreadyExists when `name` is taken.
  absl::Status Register(const std::string& name, std::unique_ptr<Connector> connector);

  // The connector registered as `name`, or nullptr.
  const Connector* Find(const std::string& name) const;

  // The registered names, sorted.
  std::vector<std::string> Names() const;

  // Connector::Validate of connector `name`; kInvalidArgument when no
  // connector has that name ("unknown connector 'x'; expected one of ...").
  absl::Status Validate(const std::string& name, const Properties& properties) const;

  // The operator of source / sink connector `name`; kInvalidArgument for an
  // unknown name or a connector of the other kind ("connector 'kafka-sink'
  // is a sink, not a source"), else the errors of the connector.
  absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(const std::string& name,
                                                                     const Properties& properties,
                                                                     const SourceContext& context) const;
  absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const std::string& name,
                                                                   const Properties& properties) const;

 private:
  // Find, or the "unknown connector" error.
  absl::StatusOr<const Connector*> Get(const std::string& name) const;
  // Get, or the error for a connector that is not of `kind`.
  absl::StatusOr<const Connector*> GetOfKind(const std::string& name, Connector::Kind kind) const;

  std::map<std::string, std::unique_ptr<Connector>> connectors_;
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_REGISTRY_H_
