#include "connectors/kafka/kafka_client.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging/logging.h"
#include "common/retry/backoff.h"

namespace weir::connectors::kafka_internal {
namespace {

constexpr int kDefaultOpenTimeoutMs = 20000;

}  // namespace

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

std::string ExplainBrokerError(std::string error, int librdkafka_version) {
  // librdkafka before 2.6.1 sends a SCRAM client-final-message that repeats
  // the client nonce; Kafka 4.0 and later check it as RFC 5802 asks and
  // refuse the login as "invalid credentials", whatever the password.
  constexpr int kScramFixedIn = 0x020601ff;
  if (librdkafka_version < kScramFixedIn && absl::StrContains(error, "invalid credentials") &&
      absl::StrContains(error, "SCRAM")) {
    absl::StrAppend(&error, " [librdkafka ", RdKafka::version_str(),
                    " on this host cannot log in with SCRAM to Kafka 4.0 or later brokers, whatever the "
                    "password (fixed in librdkafka 2.6.1): against such brokers use SASL PLAIN over TLS "
                    "(sasl.mechanisms=PLAIN) or a newer librdkafka; against older brokers, check "
                    "sasl.username and sasl.password]");
  }
  return error;
}

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
        last_error_ = ExplainBrokerError(std::move(text), RdKafka::version());
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
      last_error_ = ExplainBrokerError(text, RdKafka::version());
      if (event.fatal() && fatal_error_.empty()) fatal_error_ = last_error_;
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
  // partition without a leader while a topic is being created or moved;
  // 100 ms apart, since metadata() itself waits for a usable broker.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
  const retry::BackoffOptions pause{
      .initial = absl::Milliseconds(100), .multiplier = 1, .max = absl::Milliseconds(100)};
  auto remaining_ms = [&] {
    return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
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
    std::string last_problem = "no metadata response";
    // The try's status is the answer (the topic is missing, or not ours to
    // describe), not something to wait out.
    bool answered = false;
    const retry::RetryOutcome outcome = retry::Retry(
        {.backoff = pause, .deadline = deadline},
        [&]() -> absl::Status {
          const int wait_ms = remaining_ms();
          if (wait_ms <= 0) return absl::DeadlineExceededError(last_problem);
          RdKafka::Metadata* raw = nullptr;
          const RdKafka::ErrorCode code = client.metadata(false, topic.get(), &raw, wait_ms);
          std::unique_ptr<RdKafka::Metadata> metadata(raw);
          if (code != RdKafka::ERR_NO_ERROR) {
            last_problem = RdKafka::err2str(code);
            return absl::UnavailableError(last_problem);
          }
          const RdKafka::TopicMetadata* found = nullptr;
          for (const RdKafka::TopicMetadata* t : *metadata->topics()) {
            if (t->topic() == name) found = t;
          }
          const RdKafka::ErrorCode topic_code =
              found == nullptr ? RdKafka::ERR_UNKNOWN_TOPIC_OR_PART : found->err();
          if (topic_code == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART ||
              (topic_code == RdKafka::ERR_NO_ERROR && found->partitions()->empty())) {
            answered = true;
            return absl::NotFoundError(absl::StrCat("Kafka topic '", name, "' does not exist on brokers ", brokers,
                                                    " (create it first, e.g. weir kafka create-topic --brokers ",
                                                    brokers, " ", name, " --partitions 4)"));
          }
          if (topic_code == RdKafka::ERR_TOPIC_AUTHORIZATION_FAILED) {
            answered = true;
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
          if (!ready) return absl::UnavailableError(last_problem);
          counts[name] = static_cast<int32_t>(found->partitions()->size());
          return absl::OkStatus();
        },
        [&](const absl::Status& status) { return !answered && absl::IsUnavailable(status); });
    if (outcome.status.ok()) continue;
    if (answered) return outcome.status;
    return unreachable(last_problem);
  }
  return counts;
}

}  // namespace weir::connectors::kafka_internal
