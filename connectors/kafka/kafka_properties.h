// Which librdkafka properties a job may set on its Kafka sources and sinks
// (`kafka.<name>` vertex properties), and the check of their values.
//
// A job's properties arrive from whoever may submit jobs. Some librdkafka
// properties name a file to read, a library to load or a command to run
// (plugin.library.paths, ssl.engine.location, sasl.kerberos.kinit.cmd, ...):
// handed to librdkafka they would run code in the process that does so. So a
// job may set only the properties of a fixed allow-list — tuning, client
// identity, and SASL/TLS settings given inline (PEM strings, not files) — and
// their values are checked here from a table, without creating any librdkafka
// configuration. This is what lets the JobManager validate submissions
// without librdkafka touching them; TaskManagers apply the same list before
// they configure a client.
//
// An operator who trusts every job submitter can allow more names with
// `security.kafka.allowed-properties`; their values are then checked only by
// librdkafka, in the TaskManager that opens the client.
//
// Thread-safety: everything here is immutable or a pure function.
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_PROPERTIES_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_PROPERTIES_H_

#include <cstdint>
#include <set>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weir::connectors {

// What the cluster's operator allows beyond the built-in list.
struct KafkaPropertyPolicy {
  // Property names (without "kafka.") that jobs may set although they are not
  // on the built-in list; from security.kafka.allowed-properties.
  std::set<std::string> extra_allowed;

  // Parses the comma-separated list of security.kafka.allowed-properties.
  static KafkaPropertyPolicy FromList(absl::string_view comma_separated);
};

// One property of the allow-list and the values it takes (librdkafka's own
// ranges for its version in Debian 12, 2.0.2).
struct KafkaPropertySpec {
  enum class Kind { kInt, kFloat, kBool, kEnum, kFlags, kString };
  absl::string_view name;
  Kind kind;
  int64_t min_value = 0;  // kInt, kFloat
  int64_t max_value = 0;
  // kEnum: the allowed values; kFlags: the allowed comma-separated flags.
  absl::string_view values = {};
};

// The built-in allow-list, sorted by name.
std::span<const KafkaPropertySpec> JobSettableKafkaProperties();

// Checks `name` = `value` (name without "kafka.") against the allow-list and
// `policy`. kPermissionDenied for a name that is not allowed, saying how an
// operator can allow it; kInvalidArgument for a value out of its range.
// `connector` prefixes the message.
absl::Status CheckJobKafkaProperty(absl::string_view connector, absl::string_view name,
                                   absl::string_view value, const KafkaPropertyPolicy& policy);

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_PROPERTIES_H_
