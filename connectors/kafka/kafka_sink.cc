#include "connectors/kafka/kafka_sink.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging/logging.h"
#include "connectors/kafka/kafka_client.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;

// librdkafka's default message.timeout.ms.
constexpr int64_t kDefaultMessageTimeoutMs = 300000;
// EndInput waits this much longer than message.timeout.ms: by then every
// record has been delivered or reported failed.
constexpr int64_t kFlushMarginMs = 10000;
// One flush() call at most, so that failures are noticed between calls.
constexpr int kFlushStepMs = 1000;
// How long Process serves delivery reports when the producer queue is full.
constexpr int kQueueFullPollMs = 100;
// Close (without EndInput, e.g. on cancel) gives the brokers this long.
constexpr int kCloseFlushMs = 5000;

}  // namespace

KafkaSink::KafkaSink(KafkaSinkConfig config)
    : config_(std::move(config)), log_(logging::Get("kafka")) {}

KafkaSink::~KafkaSink() { Close(); }

void KafkaSink::DeliveryReports::dr_cb(RdKafka::Message& message) { sink_->OnDelivery(message); }

void KafkaSink::Open(OperatorContext& context, RecordOutput* output) {
  using kafka_internal::SetOrThrow;
  WEIR_CHECK(producer_ == nullptr, "KafkaSink::Open called twice");
  client_ = absl::StrCat("KafkaSink '", context.operator_name(), "' subtask ",
                         context.subtask_index(), "/", context.parallelism());
  events_ = std::make_unique<kafka_internal::ClientEvents>(client_);
  const bool at_least_once = config_.guarantee == kafka::Guarantee::kAtLeastOnce;

  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  // Defaults the extras may override. murmur2_random is the partitioner of
  // Kafka's Java producer: keyed records land where Java writers put them.
  SetOrThrow(*conf, "client.id", "weir-kafka-sink");
  SetOrThrow(*conf, "partitioner", "murmur2_random");
  if (!at_least_once) SetOrThrow(*conf, "acks", "1");
  for (const auto& [name, value] : config_.memory_properties) SetOrThrow(*conf, name, value);
  for (const auto& [name, value] : config_.kafka_properties) SetOrThrow(*conf, name, value);
  // What the guarantee relies on; FromProperties refuses extras for these.
  SetOrThrow(*conf, "bootstrap.servers", config_.brokers);
  if (at_least_once) {
    SetOrThrow(*conf, "acks", "all");
    SetOrThrow(*conf, "enable.idempotence", "true");
  } else {
    // A retried request may be written twice; at-most-once never retries.
    SetOrThrow(*conf, "enable.idempotence", "false");
    SetOrThrow(*conf, "message.send.max.retries", "0");
  }
  std::string error;
  if (conf->set("dr_cb", static_cast<RdKafka::DeliveryReportCb*>(&delivery_reports_), error) !=
          RdKafka::Conf::CONF_OK ||
      conf->set("event_cb", static_cast<RdKafka::EventCb*>(events_.get()), error) !=
          RdKafka::Conf::CONF_OK) {
    throw std::runtime_error(absl::StrCat("cannot install the Kafka producer callbacks: ", error));
  }
  producer_.reset(RdKafka::Producer::create(conf.get(), error));
  if (!producer_) {
    throw std::runtime_error(
        absl::StrCat("cannot create a Kafka producer for brokers ", config_.brokers, ": ", error));
  }
  topic_.reset(RdKafka::Topic::create(producer_.get(), config_.topic, nullptr, error));
  if (!topic_) {
    throw std::runtime_error(
        absl::StrCat("cannot create a librdkafka handle for topic '", config_.topic, "': ", error));
  }

  // A missing topic would otherwise only show as failed deliveries after
  // message.timeout.ms (brokers with auto.create.topics.enable=false).
  const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);
  absl::StatusOr<std::map<std::string, int32_t>> counts = kafka_internal::FetchPartitionCounts(
      *producer_, {config_.topic}, config_.brokers, timeout_ms, *events_);
  if (!counts.ok()) throw std::runtime_error(std::string(counts.status().message()));
  log_->info("{}: writing to topic '{}' ({} partitions) on brokers {}, {}", client_, config_.topic,
             counts->at(config_.topic), config_.brokers, kafka::GuaranteeName(config_.guarantee));
}

void KafkaSink::Process(void* record) {
  WEIR_CHECK(producer_ != nullptr, "KafkaSink::Process before Open or after Close");
  ThrowIfFailed();
  const kafka::Record& r = *static_cast<const kafka::Record*>(record);
  while (true) {
    const RdKafka::ErrorCode code = kafka_internal::ProduceRecord(*producer_, *topic_, r);
    if (code == RdKafka::ERR_NO_ERROR) break;
    if (code == RdKafka::ERR__QUEUE_FULL) {
      // Backpressure: wait for deliveries to make room.
      producer_->poll(kQueueFullPollMs);
      ThrowIfFailed();
      continue;
    }
    if (code == RdKafka::ERR__FATAL) {
      std::string reason;
      producer_->fatal_error(reason);
      throw std::runtime_error(absl::StrCat("fatal Kafka producer error writing to topic '",
                                            config_.topic, "': ", reason));
    }
    // The record cannot be written at all (e.g. larger than message.max.bytes).
    RecordFailure(code, absl::StrCat(RdKafka::err2str(code), " (record of ", r.value.size(),
                                     " bytes)"));
    ThrowIfFailed();
    break;
  }
  producer_->poll(0);
}

void KafkaSink::EndInput() {
  WEIR_CHECK(producer_ != nullptr, "KafkaSink::EndInput before Open or after Close");
  FlushAll();
  log_->info("{}: input ended, {} records delivered, {} failed", client_, delivered_, failed_);
}

void KafkaSink::PrepareSnapshotPreBarrier(int64_t checkpoint_id) {
  WEIR_CHECK(producer_ != nullptr, "KafkaSink::PrepareSnapshotPreBarrier before Open or after Close");
  // At-least-once: everything before the barrier must be acknowledged by the
  // brokers before the checkpoint may count it as written. At-most-once
  // writes without waiting.
  if (config_.guarantee != kafka::Guarantee::kAtLeastOnce) return;
  FlushAll();
  log_->debug("{}: flushed for checkpoint {} ({} records delivered so far)", client_, checkpoint_id, delivered_);
}

void KafkaSink::FlushAll() {
  const int64_t budget_ms = MessageTimeoutMs() + kFlushMarginMs;
  const auto deadline = Clock::now() + std::chrono::milliseconds(budget_ms);
  while (producer_->outq_len() > 0) {
    ThrowIfFailed();
    const int64_t remaining_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (remaining_ms <= 0) {
      std::string message = absl::StrCat(
          "Kafka producer could not deliver ", producer_->outq_len(), " records to topic '",
          config_.topic, "' on brokers ", config_.brokers, " within ",
          kafka_internal::SecondsText(budget_ms));
      if (std::string last = events_->last_error(); !last.empty()) {
        absl::StrAppend(&message, ": ", last);
      }
      throw std::runtime_error(message);
    }
    producer_->flush(static_cast<int>(std::min<int64_t>(remaining_ms, kFlushStepMs)));
  }
  ThrowIfFailed();
}

void KafkaSink::Close() {
  if (producer_ == nullptr) return;
  const bool healthy = first_failure_.empty() && events_->fatal_error().empty();
  if (healthy && producer_->outq_len() > 0) producer_->flush(kCloseFlushMs);
  if (const int left = producer_->outq_len(); left > 0) {
    const int64_t failed_before = failed_;
    producer_->purge(RdKafka::Producer::PURGE_QUEUE | RdKafka::Producer::PURGE_INFLIGHT);
    producer_->poll(0);  // delivery reports of the purged records
    log_->warn("{}: closing with {} records not delivered to topic '{}'; {} dropped", client_,
               left, config_.topic, failed_ - failed_before);
  }
  topic_.reset();
  producer_.reset();
  log_->info("{}: closed, {} records delivered, {} failed", client_, delivered_, failed_);
}

void KafkaSink::OnDelivery(const RdKafka::Message& message) {
  if (message.err() == RdKafka::ERR_NO_ERROR) {
    ++delivered_;
  } else {
    RecordFailure(message.err(), message.errstr());
  }
}

void KafkaSink::RecordFailure(RdKafka::ErrorCode code, const std::string& reason) {
  ++failed_;
  if (config_.guarantee == kafka::Guarantee::kAtLeastOnce) {
    if (first_failure_.empty()) first_failure_ = DescribeFailure(code, reason);
    return;
  }
  int64_t suppressed = 0;
  if (failure_log_limiter_.ShouldLog(&suppressed)) {
    log_->warn("{}: dropped a record (at-most-once): {} ({} failed so far, {} such messages "
               "suppressed)",
               client_, DescribeFailure(code, reason), failed_, suppressed);
  }
}

std::string KafkaSink::DescribeFailure(RdKafka::ErrorCode code, const std::string& reason) const {
  if (code == RdKafka::ERR_UNKNOWN_TOPIC_OR_PART || code == RdKafka::ERR__UNKNOWN_TOPIC) {
    return absl::StrCat("Kafka topic '", config_.topic, "' does not exist on brokers ",
                        config_.brokers, " (create it first): ", reason);
  }
  std::string text = absl::StrCat("cannot write to Kafka topic '", config_.topic,
                                  "' on brokers ", config_.brokers, ": ", reason);
  if (code == RdKafka::ERR__MSG_TIMED_OUT) {
    absl::StrAppend(&text, " (not delivered within message.timeout.ms = ", MessageTimeoutMs(),
                    " ms");
    if (std::string last = events_->last_error(); !last.empty()) {
      absl::StrAppend(&text, "; last broker error: ", last);
    }
    absl::StrAppend(&text, ")");
  }
  return text;
}

void KafkaSink::ThrowIfFailed() const {
  if (std::string fatal = events_->fatal_error(); !fatal.empty()) {
    throw std::runtime_error(absl::StrCat("fatal Kafka producer error writing to topic '",
                                          config_.topic, "': ", fatal));
  }
  if (!first_failure_.empty()) {
    throw std::runtime_error(absl::StrCat(first_failure_, " (", failed_,
                                          " records failed; guarantee at-least-once)"));
  }
}

int64_t KafkaSink::MessageTimeoutMs() const {
  for (const char* name : {"message.timeout.ms", "delivery.timeout.ms"}) {
    auto it = config_.kafka_properties.find(name);
    int64_t value = 0;
    if (it != config_.kafka_properties.end() && absl::SimpleAtoi(it->second, &value) &&
        value >= 0) {
      // 0 means "no limit" to librdkafka; EndInput still needs one.
      return value > 0 ? value : kDefaultMessageTimeoutMs;
    }
  }
  return kDefaultMessageTimeoutMs;
}

}  // namespace weir::connectors
