#include "connectors/kafka/connector_factory.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/logging/logging.h"
#include "common/status_macros.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"
#include "connectors/kafka/kafka_transactional_sink.h"
#include "connectors/kafka/protocol/transaction_client.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kKafkaPrefix[] = "kafka.";
constexpr int kDefaultOpenTimeoutMs = 20000;
// Kafka's own limit on topic names.
constexpr size_t kMaxTopicNameLength = 249;

absl::Status Invalid(absl::string_view connector, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(connector, ": ", message));
}

// The value of `key`, or nullptr when absent.
const std::string* Find(const Properties& properties, const std::string& key) {
  auto it = properties.find(key);
  return it == properties.end() ? nullptr : &it->second;
}

// Splits `properties` into the connector's own keys, which must be in
// `known`, and the kafka.* extras (returned without the prefix).
absl::StatusOr<Properties> SplitExtras(absl::string_view connector, const Properties& properties,
                                       const std::vector<std::string>& known) {
  Properties extras;
  for (const auto& [key, value] : properties) {
    if (absl::StartsWith(key, kKafkaPrefix)) {
      const std::string name = key.substr(sizeof(kKafkaPrefix) - 1);
      if (name.empty()) {
        return Invalid(connector, "property 'kafka.' names no librdkafka property; expected "
                                  "kafka.<name>, e.g. kafka.client.id");
      }
      extras[name] = value;
    } else if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Invalid(connector, absl::StrCat("unknown property '", key, "'; expected one of ",
                                             absl::StrJoin(known, ", "),
                                             ", or kafka.<librdkafka property>"));
    }
  }
  return extras;
}

absl::StatusOr<std::string> ParseBrokers(absl::string_view connector, const Properties& properties) {
  const std::string* brokers = Find(properties, "brokers");
  const std::string value =
      brokers == nullptr ? "" : std::string(absl::StripAsciiWhitespace(*brokers));
  if (value.empty()) {
    return Invalid(connector, "property 'brokers' is missing or empty; expected the Kafka "
                              "bootstrap servers as host:port[,host:port...]");
  }
  for (absl::string_view broker : absl::StrSplit(value, ',')) {
    if (absl::StripAsciiWhitespace(broker).empty()) {
      return Invalid(connector, absl::StrCat("property 'brokers' is '", value,
                                             "', which has an empty entry; expected "
                                             "host:port[,host:port...]"));
    }
  }
  return value;
}

// Kafka accepts names of 1 to 249 characters from [a-zA-Z0-9._-], except "."
// and "..".
absl::Status CheckTopicName(absl::string_view connector, absl::string_view property,
                            absl::string_view topic) {
  const bool legal_chars = std::all_of(topic.begin(), topic.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (topic.empty() || topic.size() > kMaxTopicNameLength || !legal_chars || topic == "." ||
      topic == "..") {
    return Invalid(connector,
                   absl::StrCat("property '", property, "' has the topic name '", topic,
                                "'; expected 1 to 249 characters from a-z A-Z 0-9 . _ - "
                                "(not '.' or '..')"));
  }
  return absl::OkStatus();
}

// Properties the sink sets for a guarantee; users may not change them.
std::map<std::string, std::string> SinkReservedProperties(kafka::Guarantee guarantee) {
  std::string reason;
  switch (guarantee) {
    case kafka::Guarantee::kAtLeastOnce:
      reason = "Weir sets acks=all and enable.idempotence=true for guarantee at-least-once";
      break;
    case kafka::Guarantee::kAtMostOnce:
      reason = "Weir sets enable.idempotence=false and no retries for guarantee at-most-once, so that no record is "
               "written twice";
      break;
    case kafka::Guarantee::kExactlyOnce:
      reason = "Weir runs transactions with acks=all and the idempotent producer for guarantee exactly-once";
      break;
  }
  std::map<std::string, std::string> reserved = {
      {"bootstrap.servers", "use the property 'brokers'"},
      {"metadata.broker.list", "use the property 'brokers'"},
      {"transactional.id", guarantee == kafka::Guarantee::kExactlyOnce
                               ? "Weir names the transactions; set the sink's transactional id prefix instead"
                               : "transactions are for guarantee exactly-once"},
      {"enable.idempotence", reason},
      {"message.send.max.retries", reason},
      {"retries", reason},
  };
  if (guarantee != kafka::Guarantee::kAtMostOnce) {
    reserved["acks"] = reason;
    reserved["request.required.acks"] = reason;
  }
  if (guarantee == kafka::Guarantee::kExactlyOnce) {
    reserved["statistics.interval.ms"] = "the exactly-once sink reads the producer id from the statistics";
  }
  return reserved;
}

// A transactional id prefix: what Kafka allows in a transactional id that
// Weir's "<prefix>-<subtask>-<k>" and a committable's encoding can carry.
absl::Status CheckTransactionalIdPrefix(absl::string_view connector, absl::string_view prefix) {
  const bool legal = std::all_of(prefix.begin(), prefix.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (prefix.empty() || prefix.size() > 200 || !legal) {
    return Invalid(connector, absl::StrCat("property 'transactional.id.prefix' is '", prefix,
                                           "'; expected 1 to 200 characters from a-z A-Z 0-9 . _ -"));
  }
  return absl::OkStatus();
}

std::string ConnectorList() {
  return absl::StrCat(kKafkaSourceConnector, " or ", kKafkaSinkConnector);
}

}  // namespace

absl::StatusOr<KafkaSourceConfig> KafkaSourceConfig::FromProperties(const Properties& properties,
                                                                    const KafkaPropertyPolicy& policy) {
  const absl::string_view connector = kKafkaSourceConnector;
  KafkaSourceConfig config;
  ASSIGN_OR_RETURN(config.kafka_properties,
                   SplitExtras(connector, properties,
                               {"brokers", "topics", "start", "group.id", "isolation.level",
                                "bounded", "at-most-once"}));
  ASSIGN_OR_RETURN(config.brokers, ParseBrokers(connector, properties));

  const std::string* topics = Find(properties, "topics");
  if (topics == nullptr || absl::StripAsciiWhitespace(*topics).empty()) {
    return Invalid(connector, "property 'topics' is missing or empty; expected one or more "
                              "comma-separated topic names");
  }
  std::set<std::string> unique_topics;
  for (absl::string_view topic : absl::StrSplit(*topics, ',')) {
    topic = absl::StripAsciiWhitespace(topic);
    RETURN_IF_ERROR(CheckTopicName(connector, "topics", topic));
    unique_topics.emplace(topic);
  }
  config.topics.assign(unique_topics.begin(), unique_topics.end());

  if (const std::string* group = Find(properties, "group.id")) {
    config.group_id = std::string(absl::StripAsciiWhitespace(*group));
  }

  const std::string* start = Find(properties, "start");
  const std::string start_text = start == nullptr ? "earliest" : *start;
  absl::string_view timestamp_text = start_text;
  if (start_text == "earliest") {
    config.start = Start::kEarliest;
  } else if (start_text == "latest") {
    config.start = Start::kLatest;
  } else if (start_text == "committed") {
    config.start = Start::kCommitted;
    if (config.group_id.empty()) {
      return Invalid(connector, "property 'start' is 'committed', which reads the offsets a "
                                "consumer group committed, but property 'group.id' is empty; "
                                "set group.id to that group");
    }
  } else if (absl::ConsumePrefix(&timestamp_text, "timestamp:")) {
    config.start = Start::kTimestamp;
    if (!absl::SimpleAtoi(timestamp_text, &config.start_timestamp_ms) ||
        config.start_timestamp_ms < 0) {
      return Invalid(connector, absl::StrCat("property 'start' is '", start_text,
                                             "'; expected timestamp:<milliseconds since the "
                                             "Unix epoch>, e.g. timestamp:1700000000000"));
    }
  } else {
    return Invalid(connector, absl::StrCat("property 'start' is '", start_text,
                                           "'; expected earliest, latest, committed or "
                                           "timestamp:<unix ms>"));
  }

  if (const std::string* isolation = Find(properties, "isolation.level")) {
    if (*isolation == "read_committed") {
      config.read_committed = true;
    } else if (*isolation == "read_uncommitted") {
      config.read_committed = false;
    } else {
      return Invalid(connector, absl::StrCat("property 'isolation.level' is '", *isolation,
                                             "'; expected read_committed or read_uncommitted"));
    }
  }

  if (const std::string* bounded = Find(properties, "bounded")) {
    if (*bounded == "true") {
      config.bounded = true;
    } else if (*bounded == "false") {
      config.bounded = false;
    } else {
      return Invalid(connector, absl::StrCat("property 'bounded' is '", *bounded,
                                             "'; expected true or false"));
    }
  }

  if (const std::string* amo = Find(properties, "at-most-once")) {
    if (*amo == "true") {
      config.at_most_once = true;
    } else if (*amo != "false") {
      return Invalid(connector, absl::StrCat("property 'at-most-once' is '", *amo, "'; expected true or false"));
    }
  }

  const std::string managed = "Weir manages it (explicit partition assignment, offsets kept "
                              "by Weir)";
  RETURN_IF_ERROR(kafka_internal::CheckKafkaProperties(
      connector, config.kafka_properties,
      {{"bootstrap.servers", "use the property 'brokers'"},
       {"metadata.broker.list", "use the property 'brokers'"},
       {"group.id", "use the property 'group.id'"},
       {"isolation.level", "use the property 'isolation.level'"},
       {"enable.auto.commit", managed},
       {"enable.partition.eof", managed}},
      policy));
  return config;
}

absl::StatusOr<KafkaSinkConfig> KafkaSinkConfig::FromProperties(const Properties& properties,
                                                                const KafkaPropertyPolicy& policy) {
  const absl::string_view connector = kKafkaSinkConnector;
  KafkaSinkConfig config;
  ASSIGN_OR_RETURN(config.kafka_properties,
                   SplitExtras(connector, properties, {"brokers", "topic", "guarantee", "transactional.id.prefix"}));
  ASSIGN_OR_RETURN(config.brokers, ParseBrokers(connector, properties));

  const std::string* topic = Find(properties, "topic");
  if (topic == nullptr || absl::StripAsciiWhitespace(*topic).empty()) {
    return Invalid(connector, "property 'topic' is missing or empty; expected the name of the "
                              "topic to write to");
  }
  config.topic = std::string(absl::StripAsciiWhitespace(*topic));
  RETURN_IF_ERROR(CheckTopicName(connector, "topic", config.topic));

  if (const std::string* guarantee = Find(properties, "guarantee")) {
    if (*guarantee == kafka::GuaranteeName(kafka::Guarantee::kExactlyOnce)) {
      config.guarantee = kafka::Guarantee::kExactlyOnce;
    } else if (*guarantee == kafka::GuaranteeName(kafka::Guarantee::kAtLeastOnce)) {
      config.guarantee = kafka::Guarantee::kAtLeastOnce;
    } else if (*guarantee == kafka::GuaranteeName(kafka::Guarantee::kAtMostOnce)) {
      config.guarantee = kafka::Guarantee::kAtMostOnce;
    } else {
      return Invalid(connector, absl::StrCat("property 'guarantee' is '", *guarantee,
                                             "'; expected exactly-once, at-least-once or at-most-once"));
    }
  }
  if (config.guarantee == kafka::Guarantee::kExactlyOnce) {
    const std::string* prefix = Find(properties, "transactional.id.prefix");
    if (prefix == nullptr) {
      return Invalid(connector, "guarantee exactly-once needs the property 'transactional.id.prefix' (the "
                                "DataStream API sets it from the sink's name and topic)");
    }
    RETURN_IF_ERROR(CheckTransactionalIdPrefix(connector, *prefix));
    config.transactional_id_prefix = *prefix;
    RETURN_IF_ERROR(Annotate(kafka_protocol::CheckTransactionRecoverySupported(config.kafka_properties),
                             absl::StrCat(connector, ": guarantee exactly-once")));
  }

  RETURN_IF_ERROR(kafka_internal::CheckKafkaProperties(
      connector, config.kafka_properties, SinkReservedProperties(config.guarantee), policy));
  return config;
}

absl::Status ValidateConnector(const std::string& connector, const Properties& properties,
                               const KafkaPropertyPolicy& policy) {
  if (connector == kKafkaSourceConnector) {
    return KafkaSourceConfig::FromProperties(properties, policy).status();
  }
  if (connector == kKafkaSinkConnector) {
    return KafkaSinkConfig::FromProperties(properties, policy).status();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown connector '", connector, "'; expected ", ConnectorList()));
}

absl::StatusOr<std::unique_ptr<weir::SourceOperator>> CreateSource(
    const std::string& connector, const Properties& properties, const KafkaPropertyPolicy& policy) {
  if (connector == kKafkaSinkConnector) {
    return absl::InvalidArgumentError(
        absl::StrCat("connector '", connector, "' is a sink, not a source"));
  }
  if (connector != kKafkaSourceConnector) {
    return absl::InvalidArgumentError(absl::StrCat("unknown source connector '", connector,
                                                   "'; expected ", kKafkaSourceConnector));
  }
  ASSIGN_OR_RETURN(KafkaSourceConfig config, KafkaSourceConfig::FromProperties(properties, policy));
  return std::make_unique<KafkaSource>(std::move(config));
}

absl::StatusOr<std::unique_ptr<weir::StreamOperator>> CreateSink(
    const std::string& connector, const Properties& properties, const KafkaPropertyPolicy& policy) {
  if (connector == kKafkaSourceConnector) {
    return absl::InvalidArgumentError(
        absl::StrCat("connector '", connector, "' is a source, not a sink"));
  }
  if (connector != kKafkaSinkConnector) {
    return absl::InvalidArgumentError(absl::StrCat("unknown sink connector '", connector,
                                                   "'; expected ", kKafkaSinkConnector));
  }
  ASSIGN_OR_RETURN(KafkaSinkConfig config, KafkaSinkConfig::FromProperties(properties, policy));
  if (config.guarantee == kafka::Guarantee::kExactlyOnce) {
    return std::make_unique<KafkaTransactionalSink>(std::move(config));
  }
  return std::make_unique<KafkaSink>(std::move(config));
}

namespace kafka_internal {

int OpenTimeoutMs(const Properties& kafka_properties) {
  auto it = kafka_properties.find("socket.timeout.ms");
  int timeout_ms = 0;
  if (it != kafka_properties.end() && absl::SimpleAtoi(it->second, &timeout_ms) &&
      timeout_ms > 0) {
    return timeout_ms;
  }
  return kDefaultOpenTimeoutMs;
}

std::string SecondsText(int64_t ms) {
  if (ms % 1000 == 0) return absl::StrCat(ms / 1000, " s");
  return absl::StrFormat("%.1f s", static_cast<double>(ms) / 1000.0);
}

absl::Status CheckKafkaProperties(absl::string_view connector, const Properties& kafka_properties,
                                  const std::map<std::string, std::string>& reserved,
                                  const KafkaPropertyPolicy& policy) {
  for (const auto& [name, value] : kafka_properties) {
    if (auto it = reserved.find(name); it != reserved.end()) {
      return Invalid(connector, absl::StrCat("property 'kafka.", name,
                                             "' cannot be set: ", it->second));
    }
    RETURN_IF_ERROR(CheckJobKafkaProperty(connector, name, value, policy));
  }
  return absl::OkStatus();
}

RdKafka::ErrorCode ProduceRecord(RdKafka::Producer& producer, RdKafka::Topic& topic, const kafka::Record& r) {
  const void* key = r.key.has_value() ? r.key->data() : nullptr;
  const size_t key_size = r.key.has_value() ? r.key->size() : 0;
  // librdkafka reads timestamp 0 as "now".
  const int64_t timestamp = r.timestamp_ms > 0 ? r.timestamp_ms : 0;
  // The C call: the C++ produce() that takes a timestamp copies the topic
  // name for every record.
  return static_cast<RdKafka::ErrorCode>(rd_kafka_producev(
      producer.c_ptr(), RD_KAFKA_V_RKT(topic.c_ptr()), RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_VALUE(const_cast<char*>(r.value.data()), r.value.size()),
      RD_KAFKA_V_KEY(key, key_size), RD_KAFKA_V_TIMESTAMP(timestamp), RD_KAFKA_V_END));
}

void SetOrThrow(RdKafka::Conf& conf, const std::string& name, const std::string& value) {
  std::string error;
  if (conf.set(name, value, error) != RdKafka::Conf::CONF_OK) {
    throw std::runtime_error(
        absl::StrCat("librdkafka rejects the setting ", name, "=", value, ": ", error));
  }
}

ClientEvents::ClientEvents(std::string client) : client_(std::move(client)) {}

void ClientEvents::event_cb(RdKafka::Event& event) {
  static const std::shared_ptr<spdlog::logger> log = logging::Get("kafka");
  switch (event.type()) {
    case RdKafka::Event::EVENT_LOG: {
      // Drop the "[thrd:<name>]: " prefix librdkafka puts on its lines.
      std::string text = event.str();
      if (absl::StartsWith(text, "[thrd:")) {
        if (const size_t end = text.find("]: "); end != std::string::npos) text.erase(0, end + 3);
      }
      // syslog levels: 0-3 errors, 4 warnings, 5-7 notices, info and debug.
      const int severity = static_cast<int>(event.severity());
      if (severity <= RdKafka::Event::EVENT_SEVERITY_WARNING) {
        log->warn("{}: librdkafka {}: {}", client_, event.fac(), text);
      } else {
        log->debug("{}: librdkafka {}: {}", client_, event.fac(), text);
      }
      if (severity <= RdKafka::Event::EVENT_SEVERITY_ERROR) {
        absl::MutexLock lock(&mutex_);
        last_error_ = std::move(text);
      }
      break;
    }
    case RdKafka::Event::EVENT_ERROR: {
      const std::string text =
          absl::StrCat(event.str(), " (", RdKafka::err2str(event.err()), ")");
      if (event.fatal()) {
        log->error("{}: fatal librdkafka error: {}", client_, text);
      } else {
        // Connection failures also arrive as log lines, which were logged.
        log->debug("{}: librdkafka error: {}", client_, text);
      }
      absl::MutexLock lock(&mutex_);
      last_error_ = text;
      if (event.fatal() && fatal_error_.empty()) fatal_error_ = text;
      break;
    }
    default:
      break;
  }
}

std::string ClientEvents::last_error() const {
  absl::MutexLock lock(&mutex_);
  return last_error_;
}

void ClientEvents::ClearLastError() {
  absl::MutexLock lock(&mutex_);
  last_error_.clear();
}

std::string ClientEvents::fatal_error() const {
  absl::MutexLock lock(&mutex_);
  return fatal_error_;
}

absl::StatusOr<std::map<std::string, int32_t>> FetchPartitionCounts(
    RdKafka::Handle& client, const std::vector<std::string>& topics, const std::string& brokers,
    int timeout_ms, const ClientEvents& events) {
  // Retries only what may clear up: no broker yet, a request timing out, a
  // partition without a leader while a topic is being created or moved.
  constexpr auto kRetryBackoff = std::chrono::milliseconds(100);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto remaining_ms = [&] {
    return static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
               .count()));
  };
  auto unreachable = [&](const std::string& error) {
    std::string message = absl::StrCat("cannot reach Kafka brokers at ", brokers, " within ",
                                       SecondsText(timeout_ms), ": ", error);
    if (const std::string last = events.last_error(); !last.empty() && last != error) {
      absl::StrAppend(&message, " (last broker error: ", last, ")");
    }
    return absl::UnavailableError(message);
  };

  std::map<std::string, int32_t> counts;
  for (const std::string& name : topics) {
    std::string error;
    std::unique_ptr<RdKafka::Topic> topic(RdKafka::Topic::create(&client, name, nullptr, error));
    if (!topic) {
      return absl::InternalError(
          absl::StrCat("cannot create a librdkafka handle for topic '", name, "': ", error));
    }
    std::string last_problem;
    while (true) {
      const int wait_ms = remaining_ms();
      if (wait_ms <= 0) {
        if (last_problem.empty()) last_problem = "no metadata response";
        return unreachable(last_problem);
      }
      RdKafka::Metadata* raw = nullptr;
      const RdKafka::ErrorCode code = client.metadata(false, topic.get(), &raw, wait_ms);
      std::unique_ptr<RdKafka::Metadata> metadata(raw);
      if (code != RdKafka::ERR_NO_ERROR) {
        last_problem = RdKafka::err2str(code);
        // metadata() itself waits for a usable broker; pause only when it
        // came back early.
        if (remaining_ms() > 0) std::this_thread::sleep_for(kRetryBackoff);
        continue;
      }
      const RdKafka::TopicMetadata* found = nullptr;
      for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
        if (t->topic() == name) found = t;
      }
      const RdKafka::ErrorCode topic_code =
          found == nullptr ? RdKafka::ERR_UNKNOWN_TOPIC_OR_PART : found->err();
      if (topic_code == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART ||
          (topic_code == RdKafka::ERR_NO_ERROR && found->partitions()->empty())) {
        return absl::NotFoundError(absl::StrCat("Kafka topic '", name,
                                                "' does not exist on brokers ", brokers,
                                                " (create it first)"));
      }
      if (topic_code == RdKafka::ERR_TOPIC_AUTHORIZATION_FAILED) {
        return absl::PermissionDeniedError(
            absl::StrCat("not authorized to describe Kafka topic '", name, "' on brokers ",
                         brokers, ": grant the client Describe and Read/Write on it"));
      }
      bool ready = topic_code == RdKafka::ERR_NO_ERROR;
      if (!ready) {
        last_problem = absl::StrCat("topic '", name, "': ", RdKafka::err2str(topic_code));
      }
      for (const RdKafka::PartitionMetadata* p : *found->partitions()) {
        if (ready && (p->err() == RdKafka::ERR_LEADER_NOT_AVAILABLE || p->leader() < 0)) {
          last_problem = absl::StrCat("partition ", p->id(), " of topic '", name,
                                      "' has no leader");
          ready = false;
        }
      }
      if (ready) {
        counts[name] = static_cast<int32_t>(found->partitions()->size());
        break;
      }
      if (remaining_ms() > 0) std::this_thread::sleep_for(kRetryBackoff);
    }
  }
  return counts;
}

bool LogLimiter::ShouldLog(int64_t* suppressed) {
  const auto now = Clock::now();
  if (logged_once_ && now - last_ < interval_) {
    ++suppressed_;
    return false;
  }
  logged_once_ = true;
  last_ = now;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace kafka_internal
}  // namespace weir::connectors
