#include "connectors/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace weir::connectors {

absl::Status ConnectorRegistry::Register(const std::string& name, std::unique_ptr<Connector> connector) {
  if (name.empty()) return absl::InvalidArgumentError("a connector needs a name");
  if (connector == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("connector '", name, "' is null"));
  }
  auto [it, inserted] = connectors_.emplace(name, std::move(connector));
  if (!inserted) {
    return absl::AlreadyExistsError(absl::StrCat("a connector named '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

const Connector* ConnectorRegistry::Find(const std::string& name) const {
  auto it = connectors_.find(name);
  return it == connectors_.end() ? nullptr : it->second.get();
}

std::vector<std::string> ConnectorRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(connectors_.size());
  for (const auto& [name, connector] : connectors_) names.push_back(name);
  return names;
}

absl::StatusOr<const Connector*> ConnectorRegistry::Get(const std::string& name) const {
  if (const Connector* connector = Find(name)) return connector;
  if (connectors_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown connector '", name, "'; this cluster has no connectors registered"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown connector '", name, "'; expected one of ", absl::StrJoin(Names(), ", ")));
}

absl::StatusOr<const Connector*> ConnectorRegistry::GetOfKind(const std::string& name, Connector::Kind kind) const {
  ASSIGN_OR_RETURN(const Connector* connector, Get(name));
  if (connector->kind() != kind) {
    return absl::InvalidArgumentError(absl::StrCat("connector '", name, "' is a ", KindName(connector->kind()),
                                                   ", not a ", KindName(kind)));
  }
  return connector;
}

absl::Status ConnectorRegistry::Validate(const std::string& name, const Properties& properties) const {
  ASSIGN_OR_RETURN(const Connector* connector, Get(name));
  return connector->Validate(properties);
}

absl::StatusOr<std::unique_ptr<weir::SourceOperator>> ConnectorRegistry::CreateSource(
    const std::string& name, const Properties& properties, const SourceContext& context) const {
  ASSIGN_OR_RETURN(const Connector* connector, GetOfKind(name, Connector::Kind::kSource));
  return connector->CreateSource(properties, context);
}

absl::StatusOr<std::unique_ptr<weir::StreamOperator>> ConnectorRegistry::CreateSink(const std::string& name,
                                                                                    const Properties& properties) const {
  ASSIGN_OR_RETURN(const Connector* connector, GetOfKind(name, Connector::Kind::kSink));
  return connector->CreateSink(properties);
}

}  // namespace weir::connectors
