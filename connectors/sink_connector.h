// ConfiguredSinkConnector<Config, Sink>: a sink connector that is nothing
// but its properties' parser and its operator. Config parses and checks the
// properties (static absl::StatusOr<Config> FromProperties(const
// Properties&), contacting nothing); Sink is the operator made from a Config.
// Validate parses; CreateSink parses and makes the sink. Connectors that
// also claim names or check the job's checkpointing write their own.
//
//   class RedisSinkConnector final : public ConfiguredSinkConnector<RedisSinkConfig, RedisSink> {};
//
// Thread-safety: stateless; any thread may call it.
#pragma once

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "connectors/connector.h"
#include "weir/operator.h"

namespace weir::connectors {

template <typename Config, typename Sink>
class ConfiguredSinkConnector : public Connector {
 public:
  Kind kind() const override { return Kind::kSink; }
  absl::Status Validate(const Properties& properties) const override {
    return Config::FromProperties(properties).status();
  }
  absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const Properties& properties) const override {
    absl::StatusOr<Config> config = Config::FromProperties(properties);
    if (!config.ok()) return config.status();
    return std::make_unique<Sink>(*std::move(config));
  }
};

}  // namespace weir::connectors
