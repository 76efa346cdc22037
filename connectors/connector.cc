#include "connectors/connector.h"

#include "absl/strings/str_cat.h"

namespace weir::connectors {

const char* KindName(Connector::Kind kind) {
  return kind == Connector::Kind::kSource ? "source" : "sink";
}

absl::Status Connector::ValidateForJob(const Properties& properties, const JobCheckpointing& checkpointing) const {
  return absl::OkStatus();
}

std::optional<ExclusiveNameClaim> Connector::ExclusiveName(const Properties& properties) const {
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<weir::SourceOperator>> Connector::CreateSource(const Properties& properties,
                                                                              const SourceContext& context) const {
  return absl::InvalidArgumentError(
      absl::StrCat("this connector is a ", KindName(kind()), " and cannot create a source"));
}

absl::StatusOr<std::unique_ptr<weir::StreamOperator>> Connector::CreateSink(const Properties& properties) const {
  return absl::InvalidArgumentError(
      absl::StrCat("this connector is a ", KindName(kind()), " and cannot create a sink"));
}

}  // namespace weir::connectors
