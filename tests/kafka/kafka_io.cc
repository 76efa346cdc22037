#include "tests/kafka/kafka_io.h"

#include <librdkafka/rdkafkacpp.h>

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace weir::test {
namespace {

std::unique_ptr<RdKafka::Conf> Conf(const std::map<std::string, std::string>& props) {
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  std::string err;
  for (const auto& [k, v] : props) conf->set(k, v, err);
  return conf;
}

// Every partition of `topic` and its end offset as `consumer` sees it (its
// isolation level decides: high watermark or last stable offset).
absl::StatusOr<std::map<int32_t, int64_t>> PartitionEnds(RdKafka::KafkaConsumer& consumer, const std::string& topic) {
  std::string err;
  std::unique_ptr<RdKafka::Topic> handle(RdKafka::Topic::create(&consumer, topic, nullptr, err));
  RdKafka::Metadata* raw = nullptr;
  if (consumer.metadata(false, handle.get(), &raw, 10000) != RdKafka::ERR_NO_ERROR || raw == nullptr) {
    return absl::UnavailableError(absl::StrCat("no metadata for topic ", topic));
  }
  std::unique_ptr<RdKafka::Metadata> metadata(raw);
  std::map<int32_t, int64_t> end;
  for (const auto* t : *metadata->topics()) {
    for (const auto* p : *t->partitions()) {
      int64_t low = 0, high = 0;
      const RdKafka::ErrorCode code = consumer.query_watermark_offsets(topic, p->id(), &low, &high, 10000);
      if (code != RdKafka::ERR_NO_ERROR) {
        return absl::UnavailableError(absl::StrCat("end offset of ", topic, "/", p->id(), ": ", RdKafka::err2str(code)));
      }
      end[p->id()] = high;
    }
  }
  return end;
}

// A read_committed consumer (group `group`) assigned every partition of
// `topic` from its beginning; *ends gets each partition's end offset now.
absl::StatusOr<std::unique_ptr<RdKafka::KafkaConsumer>> ReadCommittedFromStart(
    std::map<std::string, std::string> settings, const std::string& topic, std::map<int32_t, int64_t>* ends) {
  settings.insert({{"enable.auto.commit", "false"}, {"isolation.level", "read_committed"}});
  auto conf = Conf(settings);
  std::string err;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!consumer) return absl::InternalError(absl::StrCat("creating consumer: ", err));
  ASSIGN_OR_RETURN(*ends, PartitionEnds(*consumer, topic));
  std::vector<RdKafka::TopicPartition*> partitions;
  for (const auto& [partition, high] : *ends) {
    partitions.push_back(RdKafka::TopicPartition::create(topic, partition, RdKafka::Topic::OFFSET_BEGINNING));
  }
  consumer->assign(partitions);
  RdKafka::TopicPartition::destroy(partitions);
  return consumer;
}

KafkaMessage ToMessage(const RdKafka::Message& msg) {
  KafkaMessage m;
  if (msg.key() != nullptr) m.key = *msg.key();
  m.value.assign(static_cast<const char*>(msg.payload()), msg.len());
  m.partition = msg.partition();
  m.offset = msg.offset();
  return m;
}

}  // namespace

absl::Status ProduceMessages(const std::string& bootstrap, const std::string& topic,
                             const std::vector<KafkaMessage>& messages) {
  // Idempotent, so a retried request cannot reorder a partition.
  auto conf = Conf({{"bootstrap.servers", bootstrap},
                    {"acks", "all"},
                    {"enable.idempotence", "true"},
                    {"linger.ms", "5"}});
  std::string err;
  std::unique_ptr<RdKafka::Producer> producer(RdKafka::Producer::create(conf.get(), err));
  if (!producer) return absl::InternalError(absl::StrCat("creating producer: ", err));
  for (const KafkaMessage& m : messages) {
    while (true) {
      RdKafka::ErrorCode code = producer->produce(
          topic, m.partition >= 0 ? m.partition : RdKafka::Topic::PARTITION_UA, RdKafka::Producer::RK_MSG_COPY,
          const_cast<char*>(m.value.data()), m.value.size(), m.key ? m.key->data() : nullptr,
          m.key ? m.key->size() : 0, m.timestamp_ms, nullptr);
      if (code == RdKafka::ERR__QUEUE_FULL) {
        producer->poll(50);
        continue;
      }
      if (code != RdKafka::ERR_NO_ERROR) return absl::InternalError(RdKafka::err2str(code));
      break;
    }
  }
  if (producer->flush(60000) != RdKafka::ERR_NO_ERROR || producer->outq_len() > 0) {
    return absl::DeadlineExceededError("producing to the test broker did not finish within 60 s");
  }
  return absl::OkStatus();
}

void SortByPosition(std::vector<KafkaMessage>* messages) {
  std::sort(messages->begin(), messages->end(), [](const KafkaMessage& a, const KafkaMessage& b) {
    return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
  });
}

namespace {

// ReadTopic (`stable` false) or ReadTopicCommittedNow (true).
absl::StatusOr<std::vector<KafkaMessage>> ReadTopicUpTo(const std::string& bootstrap, const std::string& topic,
                                                        absl::Duration timeout, bool stable) {
  std::map<int32_t, int64_t> end;
  ASSIGN_OR_RETURN(
      std::unique_ptr<RdKafka::KafkaConsumer> consumer,
      ReadCommittedFromStart(
          {{"bootstrap.servers", bootstrap}, {"group.id", "weir-test-reader"}, {"enable.partition.eof", "true"}},
          topic, &end));
  if (stable) {
    // Stop at the last stable offset: a read_committed consumer gets no further.
    ASSIGN_OR_RETURN(end, EndOffsets(bootstrap, topic, /*read_committed=*/true));
  }
  std::map<int32_t, bool> done;
  for (const auto& [p, high] : end) done[p] = high == 0;
  std::vector<KafkaMessage> out;
  absl::Time deadline = absl::Now() + timeout;
  auto all_done = [&] {
    for (const auto& [p, d] : done) {
      if (!d) return false;
    }
    return true;
  };
  while (!all_done()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("reading ", topic, ": got ", out.size(), " records before the deadline"));
    }
    std::unique_ptr<RdKafka::Message> msg(consumer->consume(200));
    if (msg->err() == RdKafka::ERR__TIMED_OUT) continue;
    if (msg->err() == RdKafka::ERR__PARTITION_EOF) {
      if (msg->offset() >= end[msg->partition()]) done[msg->partition()] = true;
      continue;
    }
    if (msg->err() != RdKafka::ERR_NO_ERROR) return absl::InternalError(msg->errstr());
    KafkaMessage m = ToMessage(*msg);
    if (m.offset + 1 >= end[m.partition]) done[m.partition] = true;
    out.push_back(std::move(m));
  }
  consumer->close();
  return out;
}

}  // namespace

absl::StatusOr<std::vector<KafkaMessage>> ReadTopic(const std::string& bootstrap, const std::string& topic,
                                                    absl::Duration timeout) {
  return ReadTopicUpTo(bootstrap, topic, timeout, /*stable=*/false);
}

absl::StatusOr<std::vector<KafkaMessage>> ReadTopicCommittedNow(const std::string& bootstrap,
                                                                const std::string& topic, absl::Duration timeout) {
  return ReadTopicUpTo(bootstrap, topic, timeout, /*stable=*/true);
}

absl::StatusOr<std::map<int32_t, int64_t>> EndOffsets(const std::string& bootstrap, const std::string& topic,
                                                      bool read_committed) {
  auto conf = Conf({{"bootstrap.servers", bootstrap},
                    {"group.id", "weir-test-offsets"},
                    {"isolation.level", read_committed ? "read_committed" : "read_uncommitted"}});
  std::string err;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer(RdKafka::KafkaConsumer::create(conf.get(), err));
  if (!consumer) return absl::InternalError(absl::StrCat("creating consumer: ", err));
  absl::StatusOr<std::map<int32_t, int64_t>> end = PartitionEnds(*consumer, topic);
  consumer->close();
  return end;
}

LiveReader::LiveReader(std::string bootstrap, std::string topic)
    : bootstrap_(std::move(bootstrap)), topic_(std::move(topic)), thread_([this] { Run(); }) {}

LiveReader::~LiveReader() { Stop(); }

std::vector<KafkaMessage> LiveReader::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  return read_;
}

std::string LiveReader::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void LiveReader::Run() {
  auto fail = [&](std::string message) {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = std::move(message);
  };
  std::map<int32_t, int64_t> ends;
  absl::StatusOr<std::unique_ptr<RdKafka::KafkaConsumer>> opened = ReadCommittedFromStart(
      {{"bootstrap.servers", bootstrap_}, {"group.id", "weir-test-live-reader"}, {"fetch.wait.max.ms", "100"}},
      topic_, &ends);
  if (!opened.ok()) return fail(std::string(opened.status().message()));
  RdKafka::KafkaConsumer& consumer = **opened;
  while (!stop_) {
    std::unique_ptr<RdKafka::Message> msg(consumer.consume(100));
    if (msg->err() == RdKafka::ERR__TIMED_OUT || msg->err() == RdKafka::ERR__PARTITION_EOF) continue;
    if (msg->err() != RdKafka::ERR_NO_ERROR) {
      fail(msg->errstr());
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    read_.push_back(ToMessage(*msg));
  }
  consumer.close();
}

}  // namespace weir::test
