// The property checks of the Kafka connectors: KafkaSourceConfig and
// KafkaSinkConfig::FromProperties (declared in kafka_source.h and
// kafka_sink.h). They contact no broker and create no librdkafka object, so
// the JobManager can run them on untrusted submissions.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_memory.h"
#include "connectors/kafka/kafka_properties.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "weir/job_graph.h"

namespace weir::connectors {
namespace {

constexpr char kKafkaPrefix[] = "kafka.";
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

// Checks the kafka.<name> extras of `connector`: none may be in `reserved`
// (name -> why not), which lists what the connector sets itself, and each
// must pass CheckJobKafkaProperty.
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

// The source's event time: weir.event-time=source with the watermark.*
// properties kafka::Source writes for a WatermarkStrategy; none of them
// without weir.event-time.
absl::StatusOr<std::optional<KafkaSourceConfig::EventTime>> ParseEventTime(absl::string_view connector,
                                                                           const Properties& properties) {
  const std::string* marker = Find(properties, std::string(kEventTimeProperty));
  if (marker == nullptr) {
    for (const auto& [key, value] : properties) {
      if (absl::StartsWith(key, "watermark.")) {
        return Invalid(connector, absl::StrCat("property '", key, "' needs '", std::string(kEventTimeProperty),
                                               "' = 'source' (kafka::Source sets both from its watermark strategy)"));
      }
    }
    return std::nullopt;
  }
  if (*marker != "source") {
    return Invalid(connector,
                   absl::StrCat("property '", std::string(kEventTimeProperty), "' is '", *marker, "'; expected source"));
  }
  KafkaSourceConfig::EventTime event_time;
  auto milliseconds = [&](const char* key, int64_t* out) -> absl::Status {
    const std::string* text = Find(properties, key);
    if (text == nullptr) return absl::OkStatus();
    if (!absl::SimpleAtoi(*text, out) || *out < 0) {
      return Invalid(connector, absl::StrCat("property '", key, "' is '", *text,
                                             "'; expected a whole number of milliseconds, 0 or more"));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(milliseconds("watermark.out-of-orderness-ms", &event_time.out_of_orderness_ms));
  RETURN_IF_ERROR(milliseconds("watermark.idleness-ms", &event_time.idleness_ms));
  RETURN_IF_ERROR(milliseconds("watermark.max-future-ms", &event_time.max_future_ms));
  RETURN_IF_ERROR(milliseconds("watermark.max-drift-ms", &event_time.max_drift_ms));
  if (const std::string* invalid = Find(properties, "watermark.invalid-timestamps")) {
    if (*invalid != "fail" && *invalid != "drop") {
      return Invalid(connector, absl::StrCat("property 'watermark.invalid-timestamps' is '", *invalid,
                                             "'; expected fail or drop"));
    }
    event_time.drop_invalid = *invalid == "drop";
  }
  if (const std::string* timestamps = Find(properties, "watermark.timestamps")) {
    if (*timestamps != "record" && *timestamps != "extractor") {
      return Invalid(connector, absl::StrCat("property 'watermark.timestamps' is '", *timestamps,
                                             "'; expected record (the Kafka timestamp) or extractor"));
    }
    event_time.extractor = *timestamps == "extractor";
  }
  return event_time;
}

}  // namespace

absl::StatusOr<KafkaSourceConfig> KafkaSourceConfig::FromProperties(const Properties& properties,
                                                                    const KafkaPropertyPolicy& policy) {
  const absl::string_view connector = kKafkaSourceConnector;
  KafkaSourceConfig config;
  ASSIGN_OR_RETURN(config.kafka_properties,
                   SplitExtras(connector, properties,
                               {"brokers", "topics", "start", "group.id", "isolation.level", "bounded",
                                "at-most-once", std::string(kEventTimeProperty), "watermark.out-of-orderness-ms",
                                "watermark.idleness-ms", "watermark.max-future-ms", "watermark.invalid-timestamps",
                                "watermark.timestamps", "watermark.max-drift-ms"}));
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

  ASSIGN_OR_RETURN(config.event_time, ParseEventTime(connector, properties));

  const std::string managed = "Weir manages it (explicit partition assignment, offsets kept "
                              "by Weir)";
  RETURN_IF_ERROR(CheckKafkaProperties(
      connector, config.kafka_properties,
      {{"bootstrap.servers", "use the property 'brokers'"},
       {"metadata.broker.list", "use the property 'brokers'"},
       {"group.id", "use the property 'group.id'"},
       {"isolation.level", "use the property 'isolation.level'"},
       {"enable.auto.commit", managed},
       {"enable.partition.eof", managed}},
      policy));
  RETURN_IF_ERROR(CheckConsumerMemoryProperties(connector, config.kafka_properties));
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

  RETURN_IF_ERROR(CheckKafkaProperties(
      connector, config.kafka_properties, SinkReservedProperties(config.guarantee), policy));
  RETURN_IF_ERROR(CheckProducerMemoryProperties(connector, config.kafka_properties));
  return config;
}

}  // namespace weir::connectors
