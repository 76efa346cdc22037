// The built-in connectors a job graph names by `VertexSpec::connector`
// ("kafka-source", "kafka-sink"): checking their properties at submission and
// creating the operators a TaskManager runs.
//
// Properties are the strings weir::kafka::Source / weir::kafka::Sink
// (api/weir/kafka.h) put into a vertex:
//   kafka-source: brokers, topics (comma-joined), start, group.id,
//                 isolation.level, bounded, kafka.<librdkafka property>...
//   kafka-sink:   brokers, topic, guarantee, kafka.<librdkafka property>...
//
// Thread-safety: the functions are safe to call from any thread.
#ifndef WEIR_CONNECTORS_KAFKA_CONNECTOR_FACTORY_H_
#define WEIR_CONNECTORS_KAFKA_CONNECTOR_FACTORY_H_

#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "connectors/kafka/kafka_properties.h"
#include "weir/kafka.h"
#include "weir/operator.h"

namespace weir::connectors {

using Properties = std::map<std::string, std::string>;

inline constexpr char kKafkaSourceConnector[] = "kafka-source";
inline constexpr char kKafkaSinkConnector[] = "kafka-sink";

// Checks a connector's properties at job submission, before anything runs:
// the connector name, the required keys and the form of every value. Errors
// are kInvalidArgument naming the property and what was expected;
// kUnimplemented for exactly-once over TLS/SASL. kafka.<name> extras must be allowed by
// JobSettableKafkaProperties() or `policy`. Contacts no broker and creates no
// librdkafka object, so it is safe on untrusted input in the JobManager.
absl::Status ValidateConnector(const std::string& connector, const Properties& properties,
                               const KafkaPropertyPolicy& policy = {});

// What a vertex's properties say about the sink's delivery: its
// 'guarantee' and 'transactional.id.prefix' ("" when unset). They work on
// the graph's properties and on their wire form alike.
template <typename PropertyMap>
std::string PropertyOr(const PropertyMap& properties, const std::string& key) {
  auto it = properties.find(key);
  return it == properties.end() ? std::string() : std::string(it->second);
}
template <typename PropertyMap>
bool WritesExactlyOnce(const PropertyMap& properties) {
  return PropertyOr(properties, "guarantee") == kafka::GuaranteeName(kafka::Guarantee::kExactlyOnce);
}
template <typename PropertyMap>
bool WritesAtMostOnce(const PropertyMap& properties) {
  return PropertyOr(properties, "guarantee") == kafka::GuaranteeName(kafka::Guarantee::kAtMostOnce);
}

// The operator for a source / sink connector, configured but not yet opened;
// the same errors as ValidateConnector, or kInvalidArgument when `connector`
// names a sink where a source is wanted (or the reverse).
absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(
    const std::string& connector, const Properties& properties, const KafkaPropertyPolicy& policy = {});
absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(
    const std::string& connector, const Properties& properties, const KafkaPropertyPolicy& policy = {});

// librdkafka plumbing shared by KafkaSource and KafkaSink; not for other
// callers.
namespace kafka_internal {

// How long Open waits for the brokers (metadata, offsets): the
// kafka.socket.timeout.ms extra when given, else 20 s.
int OpenTimeoutMs(const Properties& kafka_properties);

// "20 s", "2.5 s".
std::string SecondsText(int64_t ms);

// Checks the kafka.<name> extras of `connector`: none may be in `reserved`
// (name -> why not), which lists what the connector sets itself, and each
// must pass CheckJobKafkaProperty.
absl::Status CheckKafkaProperties(absl::string_view connector, const Properties& kafka_properties,
                                  const std::map<std::string, std::string>& reserved,
                                  const KafkaPropertyPolicy& policy);

// Enqueues `record` on `producer` for `topic` (its key, value and
// timestamp; the partitioner picks the partition) and returns librdkafka's
// answer: ERR__QUEUE_FULL when the caller must poll and try again.
RdKafka::ErrorCode ProduceRecord(RdKafka::Producer& producer, RdKafka::Topic& topic, const kafka::Record& record);

// Sets `name`=`value` on `conf`, or throws std::runtime_error naming both.
void SetOrThrow(RdKafka::Conf& conf, const std::string& name, const std::string& value);

// Receives a client's librdkafka events: log lines go to the "kafka" logger
// (warn for errors and warnings, debug below), error events are remembered
// so that failures can say what librdkafka last complained about.
//
// Thread-safety: librdkafka calls event_cb from its own threads (log lines)
// and from the thread in poll()/consume()/flush() (errors); every method is
// safe from any thread.
class ClientEvents : public RdKafka::EventCb {
 public:
  // `client` prefixes log lines, e.g. "KafkaSource 'orders' subtask 0".
  explicit ClientEvents(std::string client);

  void event_cb(RdKafka::Event& event) override;

  // The last error librdkafka reported (log line at error level or error
  // event) since the last ClearLastError(), or "".
  std::string last_error() const ABSL_LOCKS_EXCLUDED(mutex_);
  void ClearLastError() ABSL_LOCKS_EXCLUDED(mutex_);
  // The first fatal error, or "": the client cannot be used any more.
  std::string fatal_error() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const std::string client_;
  mutable absl::Mutex mutex_;
  std::string last_error_ ABSL_GUARDED_BY(mutex_);
  std::string fatal_error_ ABSL_GUARDED_BY(mutex_);
};

// The partition count of each of `topics`, asking the brokers with bounded
// retries for up to `timeout_ms`. Errors, with messages meant for users:
// kNotFound "Kafka topic 'X' does not exist on brokers B (create it first)",
// kUnavailable "cannot reach Kafka brokers at B within N s: ...",
// kPermissionDenied for a topic the client may not describe.
absl::StatusOr<std::map<std::string, int32_t>> FetchPartitionCounts(
    RdKafka::Handle& client, const std::vector<std::string>& topics, const std::string& brokers,
    int timeout_ms, const ClientEvents& events);

// Admits one log line per interval and counts the ones it held back, so that
// a failure repeating per record logs a few lines, not one per record.
//
// Thread-safety: not thread-safe; use from one thread.
class LogLimiter {
 public:
  explicit LogLimiter(std::chrono::steady_clock::duration interval) : interval_(interval) {}

  // Whether to log now; `*suppressed` gets how many were held back since the
  // last line that was logged.
  bool ShouldLog(int64_t* suppressed);

 private:
  const std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point last_{};
  bool logged_once_ = false;
  int64_t suppressed_ = 0;
};

}  // namespace kafka_internal
}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_CONNECTOR_FACTORY_H_
