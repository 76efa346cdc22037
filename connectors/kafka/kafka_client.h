// librdkafka plumbing shared by the Kafka source and sinks (KafkaSource,
// KafkaSink, KafkaTransactionalSink): client events and their log lines,
// partition counts, producing one record, configuration setters. Not for
// callers outside connectors/kafka.
//
// Thread-safety: the functions are safe to call from any thread; the classes
// state their own contracts.
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_CLIENT_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_CLIENT_H_

#include <librdkafka/rdkafkacpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "connectors/connector.h"
#include "weir/kafka.h"

namespace weir::connectors::kafka_internal {

// How long Open waits for the brokers (metadata, offsets): the
// kafka.socket.timeout.ms extra when given, else 20 s.
int OpenTimeoutMs(const Properties& kafka_properties);

// "20 s", "2.5 s".
std::string SecondsText(int64_t ms);

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

// `error` (a broker error librdkafka reported) with what to do about it
// where the cause is known: a SCRAM login that librdkafka older than 2.6.1
// (`librdkafka_version`, as RdKafka::version()) cannot make to Kafka 4.x.
std::string ExplainBrokerError(std::string error, int librdkafka_version);

// The partition count of each of `topics`, asking the brokers with bounded
// retries for up to `timeout_ms`. Errors, with messages meant for users:
// kNotFound "Kafka topic 'X' does not exist on brokers B (create it first,
// e.g. weir kafka create-topic ...)",
// kUnavailable "cannot reach Kafka brokers at B within N s: ...",
// kPermissionDenied for a topic the client may not describe.
absl::StatusOr<std::map<std::string, int32_t>> FetchPartitionCounts(
    RdKafka::Handle& client, const std::vector<std::string>& topics, const std::string& brokers,
    int timeout_ms, const ClientEvents& events);

}  // namespace weir::connectors::kafka_internal

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_CLIENT_H_
