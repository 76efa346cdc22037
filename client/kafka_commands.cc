#include "client/kafka_commands.h"

#include <librdkafka/rdkafkacpp.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/kafka_admin.h"
#include "connectors/kafka/kafka_client.h"
#include "nlohmann/json.hpp"

namespace weir::client {
namespace {

constexpr int kTimeoutMs = 30000;

struct KafkaArgs {
  std::string subcommand;
  std::string brokers;
  std::string topic;
  int partitions = 1;
  int replication_factor = 1;
  int64_t max = -1;
  bool keyed = false;
};

absl::StatusOr<KafkaArgs> Parse(const std::vector<std::string>& args) {
  KafkaArgs parsed;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* name) -> absl::StatusOr<std::string> {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      return args[++i];
    };
    auto number = [&](const char* name, auto* out) -> absl::Status {
      absl::StatusOr<std::string> v = value(name);
      if (!v.ok()) return v.status();
      int64_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a positive number, got '", *v, "'"));
      }
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(n);
      return absl::OkStatus();
    };
    absl::Status s;
    if (a == "--brokers") {
      absl::StatusOr<std::string> v = value("--brokers");
      if (!v.ok()) return v.status();
      parsed.brokers = *v;
    } else if (a == "--partitions") {
      s = number("--partitions", &parsed.partitions);
    } else if (a == "--replication-factor") {
      s = number("--replication-factor", &parsed.replication_factor);
    } else if (a == "--max") {
      s = number("--max", &parsed.max);
    } else if (a == "--keyed") {
      parsed.keyed = true;
    } else if (!a.empty() && a[0] == '-') {
      return absl::InvalidArgumentError(absl::StrCat("unknown option '", a, "' for weir kafka"));
    } else {
      positional.push_back(a);
    }
    if (!s.ok()) return s;
  }
  if (positional.size() != 2) {
    return absl::InvalidArgumentError(
        "usage: weir kafka create-topic|produce|consume --brokers HOST:PORT[,...] TOPIC [options] (weir --help)");
  }
  parsed.subcommand = positional[0];
  parsed.topic = positional[1];
  if (parsed.brokers.empty()) return absl::InvalidArgumentError("weir kafka needs --brokers HOST:PORT[,...]");
  return parsed;
}

// `settings`, with `events` taking librdkafka's logs and errors.
std::unique_ptr<RdKafka::Conf> Conf(const std::map<std::string, std::string>& settings,
                                    connectors::kafka_internal::ClientEvents* events) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string error;
  for (const auto& [k, v] : settings) conf->set(k, v, error);
  conf->set("event_cb", static_cast<RdKafka::EventCb*>(events), error);
  return conf;
}

int Produce(const KafkaArgs& args, std::istream& in, std::ostream& out, std::ostream& err) {
  connectors::kafka_internal::ClientEvents events("weir kafka produce");
  auto conf = Conf({{"bootstrap.servers", args.brokers}, {"enable.idempotence", "true"}, {"acks", "all"},
                    {"linger.ms", "5"}, {"client.id", "weir-kafka-produce"}, {"log_level", "0"}},
                   &events);
  std::string error;
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), error));
  if (producer == nullptr) return Fail(err, absl::StrCat("cannot create a Kafka producer: ", error));
  // The topic must exist: a typo is not created silently.
  absl::StatusOr<std::map<std::string, int32_t>> counts =
      connectors::kafka_internal::FetchPartitionCounts(*producer, {args.topic}, args.brokers, kTimeoutMs, events);
  if (!counts.ok()) return Fail(err, std::string(counts.status().message()));
  int64_t records = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::string key, value = line;
    if (args.keyed) {
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) {
        return Fail(err, absl::StrCat("line ", records + 1, " has no TAB between key and value (--keyed)"), 2);
      }
      key = line.substr(0, tab);
      value = line.substr(tab + 1);
    }
    while (true) {
      const RdKafka::ErrorCode code = producer->produce(
          args.topic, RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY, value.data(), value.size(),
          args.keyed ? key.data() : nullptr, args.keyed ? key.size() : 0, 0, nullptr);
      if (code == RdKafka::ERR__QUEUE_FULL) {
        producer->poll(50);
        continue;
      }
      if (code != RdKafka::ERR_NO_ERROR) return Fail(err, absl::StrCat("producing: ", RdKafka::err2str(code)));
      break;
    }
    ++records;
    producer->poll(0);
  }
  if (producer->flush(kTimeoutMs) != RdKafka::ERR_NO_ERROR || producer->outq_len() > 0) {
    return Fail(err, absl::StrCat("not every record reached ", args.brokers, " within ", kTimeoutMs / 1000,
                                  " s: ", events.last_error()));
  }
  out << "wrote " << records << " records to " << args.topic << "\n";
  return 0;
}

int Consume(const KafkaArgs& args, bool json, std::ostream& out, std::ostream& err) {
  connectors::kafka_internal::ClientEvents events("weir kafka consume");
  auto conf = Conf({{"bootstrap.servers", args.brokers}, {"group.id", "weir-kafka-consume"},
                    {"enable.auto.commit", "false"}, {"enable.partition.eof", "true"},
                    {"isolation.level", "read_committed"}, {"client.id", "weir-kafka-consume"},
                    {"log_level", "0"}},
                   &events);
  std::string error;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(conf.get(), error));
  if (consumer == nullptr) return Fail(err, absl::StrCat("cannot create a Kafka consumer: ", error));
  absl::StatusOr<std::map<std::string, int32_t>> counts =
      connectors::kafka_internal::FetchPartitionCounts(*consumer, {args.topic}, args.brokers, kTimeoutMs, events);
  if (!counts.ok()) return Fail(err, std::string(counts.status().message()));
  std::vector<RdKafka::TopicPartition*> partitions;
  for (int32_t p = 0; p < counts->at(args.topic); ++p) {
    partitions.push_back(RdKafka::TopicPartition::create(args.topic, p, RdKafka::Topic::OFFSET_BEGINNING));
  }
  consumer->assign(partitions);
  RdKafka::TopicPartition::destroy(partitions);
  int left = counts->at(args.topic);
  int64_t records = 0;
  int idle_ms = 0;
  while (left > 0 && (args.max < 0 || records < args.max)) {
    std::unique_ptr<RdKafka::Message> message(consumer->consume(200));
    if (message->err() == RdKafka::ERR__PARTITION_EOF) {
      --left;
    } else if (message->err() == RdKafka::ERR_NO_ERROR) {
      idle_ms = 0;
      ++records;
      const std::string value(static_cast<const char*>(message->payload()), message->len());
      const std::string key = message->key() != nullptr ? *message->key() : "";
      if (json) {
        out << nlohmann::json{{"partition", message->partition()}, {"offset", message->offset()},
                              {"key", message->key() != nullptr ? nlohmann::json(key) : nlohmann::json(nullptr)},
                              {"value", value}}
                   .dump()
            << "\n";
      } else if (args.keyed) {
        out << key << "\t" << value << "\n";
      } else {
        out << value << "\n";
      }
    } else if (message->err() == RdKafka::ERR__TIMED_OUT) {
      if ((idle_ms += 200) >= kTimeoutMs) {
        return Fail(err, absl::StrCat("no progress reading ", args.topic, " for ", kTimeoutMs / 1000,
                                      " s: ", events.last_error()));
      }
    } else {
      return Fail(err, absl::StrCat("reading ", args.topic, ": ", message->errstr()));
    }
  }
  consumer->close();
  return 0;
}

}  // namespace

int RunKafka(const Options& options, std::istream& in, std::ostream& out, std::ostream& err) {
  absl::StatusOr<KafkaArgs> args = Parse(options.command_args);
  if (!args.ok()) return Fail(err, std::string(args.status().message()), 2);
  if (args->subcommand == "create-topic") {
    absl::Status created = connectors::kafka_admin::CreateTopic(args->brokers, args->topic, args->partitions,
                                                                args->replication_factor);
    if (!created.ok()) return Fail(err, absl::StrCat("creating topic ", args->topic, ": ", created.message()));
    out << "created topic " << args->topic << " (" << args->partitions << " partitions, replication factor "
        << args->replication_factor << ")\n";
    return 0;
  }
  if (args->subcommand == "produce") return Produce(*args, in, out, err);
  if (args->subcommand == "consume") return Consume(*args, options.json, out, err);
  return Fail(err, absl::StrCat("unknown kafka command '", args->subcommand, "'; expected create-topic, produce or consume"), 2);
}

}  // namespace weir::client
