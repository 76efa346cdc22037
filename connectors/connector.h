// Connector: what the runtime knows of a connector that a job graph names by
// `VertexSpec::connector` ("kafka-source", "kafka-sink", ...). The JobManager
// checks a vertex's properties at submission and against the job's
// checkpointing; a TaskManager creates the operator from them. Connectors are
// registered by name in a ConnectorRegistry (connectors/registry.h); the
// runtime knows nothing else of them.
//
// Thread-safety: a Connector is immutable once registered; every method is
// const and must be safe to call from any thread, concurrently.
#ifndef WEIR_CONNECTORS_CONNECTOR_H_
#define WEIR_CONNECTORS_CONNECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "weir/operator.h"

namespace weir::connectors {

// A vertex's connector properties, as the job API wrote them.
using Properties = std::map<std::string, std::string>;

// What a job's settings say about its checkpoints, for the checks that
// depend on them (ValidateForJob).
struct JobCheckpointing {
  // execution.checkpointing.interval is set.
  bool enabled = false;
  // execution.checkpointing.mode is EXACTLY_ONCE (barriers are aligned).
  bool aligned = true;
  absl::Duration interval = absl::ZeroDuration();
  // execution.checkpointing.timeout.
  absl::Duration timeout = absl::ZeroDuration();
  // The longest wait before a restart (restart-strategy.*: the fixed
  // delay, or the exponential strategy's max backoff; 0 without restarts).
  absl::Duration restart_delay = absl::ZeroDuration();
};

// What a TaskManager knows about a source's job when it creates the source.
struct SourceContext {
  // Every sink of the job writes at-most-once: the source must not replay
  // after a failure, but resume from the newest position it reached.
  bool job_at_most_once = false;
  // The vertex's event-time extractor (VertexSpec::timestamp_extractor), if
  // its watermark strategy has one.
  std::function<int64_t(const void* record)> timestamp_extractor;
  // pipeline.watermark.stall-warning in ms (0: off).
  int64_t event_time_stall_warning_ms = 60 * 1000;
  // The job's id and the vertex's operator id: what names state the
  // source's subtasks share outside the job (e.g. the Kafka source's
  // idleness board). Empty when not known.
  std::string job_id;
  std::string operator_id;
};

// A name that no two vertices of a job and no two running jobs may share,
// e.g. the transactional id prefix of an exactly-once Kafka sink. The fields
// after `name` complete the JobManager's refusal ("job 7f3a already writes
// exactly-once with the transactional id prefix 'orders-tx'; two jobs with
// one transactional id prefix abort each other's transactions ...").
struct ExclusiveNameClaim {
  std::string name;      // "orders-tx"
  std::string what;      // "transactional id prefix"
  std::string use;       // how the vertex holds it: "writes exactly-once with"
  std::string conflict;  // what two holders do: "abort each other's transactions"
  std::string setting;   // what gives a vertex another one: "transactional_id_prefix"
};

class Connector {
 public:
  enum class Kind { kSource, kSink };

  virtual ~Connector() = default;

  virtual Kind kind() const = 0;

  // Checks `properties` at job submission, before anything runs: required
  // keys and the form of every value. Contacts nothing and loads nothing, so
  // it is safe on untrusted input in the JobManager. Errors name the property
  // and what was expected (kInvalidArgument unless another code says more).
  virtual absl::Status Validate(const Properties& properties) const = 0;

  // Checks `properties` (which passed Validate) against the job's
  // checkpointing, e.g. that a transaction outlives a checkpoint. Default:
  // OK.
  virtual absl::Status ValidateForJob(const Properties& properties, const JobCheckpointing& checkpointing) const;

  // The name the vertex holds exclusively, if any. Default: none.
  virtual std::optional<ExclusiveNameClaim> ExclusiveName(const Properties& properties) const;

  // The operator, configured but not yet opened; the errors of Validate.
  // The defaults refuse: kInvalidArgument for a connector of the other kind.
  virtual absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(const Properties& properties,
                                                                             const SourceContext& context) const;
  virtual absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(const Properties& properties) const;
};

// "source" / "sink".
const char* KindName(Connector::Kind kind);

// A sink's delivery guarantee: its property "guarantee", one of
// "exactly-once", "at-least-once" and "at-most-once". The helpers work on the
// graph's properties and on their wire form (protobuf map) alike.
inline constexpr char kGuaranteeProperty[] = "guarantee";
inline constexpr char kExactlyOnce[] = "exactly-once";
inline constexpr char kAtLeastOnce[] = "at-least-once";
inline constexpr char kAtMostOnce[] = "at-most-once";

// The value of `key`, or "" when unset.
template <typename PropertyMap>
std::string PropertyOr(const PropertyMap& properties, const std::string& key) {
  auto it = properties.find(key);
  return it == properties.end() ? std::string() : std::string(it->second);
}
template <typename PropertyMap>
bool WritesExactlyOnce(const PropertyMap& properties) {
  return PropertyOr(properties, kGuaranteeProperty) == kExactlyOnce;
}
template <typename PropertyMap>
bool WritesAtMostOnce(const PropertyMap& properties) {
  return PropertyOr(properties, kGuaranteeProperty) == kAtMostOnce;
}

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_CONNECTOR_H_
