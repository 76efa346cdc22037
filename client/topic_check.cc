#include "client/topic_check.h"

#include <librdkafka/rdkafkacpp.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_connectors.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/kafka_source.h"

namespace weir::client {
namespace {

constexpr int kCheckTimeoutMs = 5000;

struct BrokerSet {
  connectors::Properties kafka_properties;
  // topic -> the vertices that name it
  std::map<std::string, std::vector<std::string>> topics;
};

}  // namespace

absl::Status CheckKafkaTopics(const JobGraph& graph, std::ostream& warnings) {
  // One metadata request per set of brokers.
  std::map<std::string, BrokerSet> by_brokers;
  for (const VertexSpec& v : graph.vertices) {
    if (v.connector == connectors::kKafkaSourceConnector) {
      absl::StatusOr<connectors::KafkaSourceConfig> c = connectors::KafkaSourceConfig::FromProperties(v.properties);
      if (!c.ok()) return c.status();  // the JobManager would refuse it the same way
      BrokerSet& set = by_brokers[c->brokers];
      set.kafka_properties = c->kafka_properties;
      for (const std::string& topic : c->topics) set.topics[topic].push_back(absl::StrCat("source '", v.name, "'"));
    } else if (v.connector == connectors::kKafkaSinkConnector) {
      absl::StatusOr<connectors::KafkaSinkConfig> c = connectors::KafkaSinkConfig::FromProperties(v.properties);
      if (!c.ok()) return c.status();
      BrokerSet& set = by_brokers[c->brokers];
      set.kafka_properties = c->kafka_properties;
      set.topics[c->topic].push_back(absl::StrCat("sink '", v.name, "'"));
    }
  }
  for (const auto& [brokers, set] : by_brokers) {
    std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
    std::string error;
    // The job's own settings (security.protocol, SASL, ...), then what the
    // check needs: no group, and never creating a topic by asking for it.
    for (const auto& [name, value] : set.kafka_properties) conf->set(name, value, error);
    conf->set("bootstrap.servers", brokers, error);
    conf->set("client.id", "weir-submit-topic-check", error);
    conf->set("allow.auto.create.topics", "false", error);
    conf->set("log_level", "0", error);
    connectors::kafka_internal::ClientEvents events("weir submit");
    conf->set("event_cb", static_cast<RdKafka::EventCb*>(&events), error);
    std::unique_ptr<RdKafka::Producer> client(RdKafka::Producer::create(conf.get(), error));
    if (client == nullptr) {
      warnings << "weir: warning: could not check the Kafka topics on " << brokers << ": " << error << "\n";
      continue;
    }
    std::vector<std::string> topics;
    for (const auto& [topic, users] : set.topics) topics.push_back(topic);
    absl::StatusOr<std::map<std::string, int32_t>> counts =
        connectors::kafka_internal::FetchPartitionCounts(*client, topics, brokers, kCheckTimeoutMs, events);
    if (counts.ok()) continue;
    if (absl::IsNotFound(counts.status())) {
      std::string named;
      for (const auto& [topic, users] : set.topics) {
        if (counts.status().message().find(absl::StrCat("'", topic, "'")) != absl::string_view::npos) {
          named = absl::StrCat(" (the job's ", absl::StrJoin(users, ", "), ")");
        }
      }
      return absl::NotFoundError(absl::StrCat(counts.status().message(), named,
                                              "; nothing was submitted"));
    }
    warnings << "weir: warning: could not check the Kafka topics " << absl::StrJoin(topics, ", ") << " from here ("
             << counts.status().message() << "); submitting anyway, the job fails if the TaskManagers cannot "
             << "read them either\n";
  }
  return absl::OkStatus();
}

}  // namespace weir::client
