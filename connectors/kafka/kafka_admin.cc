#include "connectors/kafka/kafka_admin.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace weir::connectors::kafka_admin {

namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kCreateDeadline = std::chrono::seconds(60);
constexpr int kRequestTimeoutMs = 30000;

struct KafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
  void operator()(rd_kafka_event_t* ev) const { rd_kafka_event_destroy(ev); }
  void operator()(rd_kafka_NewTopic_t* t) const { rd_kafka_NewTopic_destroy(t); }
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
  void operator()(rd_kafka_topic_t* t) const { rd_kafka_topic_destroy(t); }
  void operator()(const rd_kafka_metadata_t* md) const { rd_kafka_metadata_destroy(md); }
};
template <typename T>
using KafkaPtr = std::unique_ptr<T, KafkaDeleter>;

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Waits until the metadata for `name` shows `partitions` partitions, each with a leader.
absl::Status WaitForTopic(rd_kafka_t* rk, const std::string& name, int partitions,
                          Clock::time_point deadline) {
  KafkaPtr<rd_kafka_topic_t> topic(rd_kafka_topic_new(rk, name.c_str(), nullptr));
  if (!topic) {
    return absl::InternalError(absl::StrCat("rd_kafka_topic_new(", name, ") failed"));
  }
  std::string last = "no metadata response yet";
  while (RemainingMs(deadline) > 0) {
    const rd_kafka_metadata_t* raw = nullptr;
    const rd_kafka_resp_err_t err =
        rd_kafka_metadata(rk, 0, topic.get(), &raw, std::min(RemainingMs(deadline), 5000));
    KafkaPtr<const rd_kafka_metadata_t> md(raw);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      last = rd_kafka_err2str(err);
    } else if (md->topic_cnt != 1) {
      last = absl::StrCat("metadata lists ", md->topic_cnt, " topics");
    } else if (md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      last = rd_kafka_err2str(md->topics[0].err);
    } else if (md->topics[0].partition_cnt != partitions) {
      last = absl::StrCat(md->topics[0].partition_cnt, " partitions");
    } else {
      bool ready = true;
      for (int i = 0; i < md->topics[0].partition_cnt; ++i) {
        const rd_kafka_metadata_partition_t& p = md->topics[0].partitions[i];
        if (p.err != RD_KAFKA_RESP_ERR_NO_ERROR || p.leader < 0) {
          last = absl::StrCat("partition ", p.id, " has no leader yet");
          ready = false;
          break;
        }
      }
      if (ready) return absl::OkStatus();
    }
    // Metadata propagation is asynchronous; ask again shortly.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("topic ", name, " did not become ready: ", last));
}

}  // namespace

absl::Status CreateTopic(const std::string& bootstrap, const std::string& name, int partitions,
                         int replication_factor, const std::map<std::string, std::string>& kafka_properties) {
  const auto deadline = Clock::now() + kCreateDeadline;
  char errstr[512];

  KafkaPtr<rd_kafka_conf_t> conf(rd_kafka_conf_new());
  for (const auto& [key, value] : kafka_properties) {
    if (rd_kafka_conf_set(conf.get(), key.c_str(), value.c_str(), errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
      return absl::InvalidArgumentError(absl::StrCat("Kafka property '", key, "': ", errstr));
    }
  }
  if (rd_kafka_conf_set(conf.get(), "bootstrap.servers", bootstrap.c_str(), errstr,
                        sizeof(errstr)) != RD_KAFKA_CONF_OK ||
      rd_kafka_conf_set(conf.get(), "client.id", "weir-admin", errstr,
                        sizeof(errstr)) != RD_KAFKA_CONF_OK) {
    return absl::InvalidArgumentError(errstr);
  }
  // rd_kafka_new takes ownership of conf only on success.
  KafkaPtr<rd_kafka_t> rk(
      rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), errstr, sizeof(errstr)));
  if (!rk) return absl::InternalError(absl::StrCat("rd_kafka_new: ", errstr));
  conf.release();

  KafkaPtr<rd_kafka_NewTopic_t> topic(
      rd_kafka_NewTopic_new(name.c_str(), partitions, replication_factor, errstr, sizeof(errstr)));
  if (!topic) return absl::InvalidArgumentError(absl::StrCat("NewTopic: ", errstr));

  KafkaPtr<rd_kafka_AdminOptions_t> options(
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_CREATETOPICS));
  if (rd_kafka_AdminOptions_set_request_timeout(options.get(), kRequestTimeoutMs, errstr,
                                                sizeof(errstr)) ||
      rd_kafka_AdminOptions_set_operation_timeout(options.get(), kRequestTimeoutMs, errstr,
                                                  sizeof(errstr))) {
    return absl::InternalError(absl::StrCat("AdminOptions: ", errstr));
  }

  KafkaPtr<rd_kafka_queue_t> queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_NewTopic_t* topics[] = {topic.get()};
  rd_kafka_CreateTopics(rk.get(), topics, 1, options.get(), queue.get());

  KafkaPtr<rd_kafka_event_t> event;
  while (!event) {
    if (RemainingMs(deadline) == 0) {
      return absl::DeadlineExceededError(
          absl::StrCat("CreateTopics(", name, ") got no result from ", bootstrap));
    }
    event.reset(rd_kafka_queue_poll(queue.get(), std::min(RemainingMs(deadline), 1000)));
  }
  if (rd_kafka_event_type(event.get()) != RD_KAFKA_EVENT_CREATETOPICS_RESULT) {
    return absl::InternalError(
        absl::StrCat("CreateTopics: unexpected event ", rd_kafka_event_name(event.get())));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("CreateTopics(", name, ") at ", bootstrap,
                                               ": ", rd_kafka_event_error_string(event.get())));
  }
  size_t count = 0;
  const rd_kafka_topic_result_t** results = rd_kafka_CreateTopics_result_topics(
      rd_kafka_event_CreateTopics_result(event.get()), &count);
  if (count != 1) {
    return absl::InternalError(absl::StrCat("CreateTopics: ", count, " results"));
  }
  const rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[0]);
  if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("topic ", name, " already exists"));
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* msg = rd_kafka_topic_result_error_string(results[0]);
    return absl::InternalError(absl::StrCat("CreateTopics(", name, "): ",
                                            rd_kafka_err2name(err), ": ",
                                            msg != nullptr ? msg : rd_kafka_err2str(err)));
  }
  return WaitForTopic(rk.get(), name, partitions, deadline);
}

}  // namespace weir::connectors::kafka_admin
