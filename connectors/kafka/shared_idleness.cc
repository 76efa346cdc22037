#include "connectors/kafka/shared_idleness.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "connectors/kafka/kafka_client.h"
#include "librdkafka/rdkafka.h"

namespace weir::connectors::kafka_internal {
namespace {

constexpr absl::string_view kIdle = "weir idle v1";
constexpr absl::string_view kActive = "weir active v1";

std::string Name(const TopicPartitionKey& tp) { return absl::StrCat(tp.first, "[", tp.second, "]"); }

// A C partition list, freed with it.
struct PartitionList {
  explicit PartitionList(size_t size) : list(rd_kafka_topic_partition_list_new(static_cast<int>(size))) {}
  ~PartitionList() { rd_kafka_topic_partition_list_destroy(list); }
  PartitionList(const PartitionList&) = delete;
  PartitionList& operator=(const PartitionList&) = delete;
  rd_kafka_topic_partition_list_t* list;
};

}  // namespace

std::string BoardMetadata(bool idle) { return std::string(idle ? kIdle : kActive); }

std::optional<bool> ParseBoardMetadata(absl::string_view metadata) {
  if (metadata == kIdle) return true;
  if (metadata == kActive) return false;
  return std::nullopt;
}

std::string BoardGroupId(absl::string_view job_id, absl::string_view operator_id) {
  std::string group = absl::StrCat("weir-idleness-", job_id, "-", operator_id);
  for (char& c : group) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return group;
}

bool PeersCaughtUp(const std::vector<TopicPartitionKey>& partitions, const BoardRead& read,
                   const std::vector<int64_t>& ends, std::string* why) {
  for (size_t i = 0; i < partitions.size() && i < read.entries.size(); ++i) {
    const std::optional<BoardEntry>& entry = read.entries[i];
    if (!entry.has_value()) {
      *why = absl::StrCat(Name(partitions[i]), " has no entry on the board yet (its subtask has not posted)");
      return false;
    }
    if (!entry->idle) continue;
    const int64_t end = i < ends.size() ? ends[i] : -1;
    if (end < 0) {
      *why = absl::StrCat("the end offset of ", Name(partitions[i]), " (idle in another subtask) is not known");
      return false;
    }
    if (end > entry->position) {
      *why = absl::StrCat(Name(partitions[i]), " has ", end - entry->position,
                          " records its subtask has not read yet");
      return false;
    }
  }
  return true;
}

SharedIdleness::SharedIdleness(std::vector<TopicPartitionKey> own, std::vector<TopicPartitionKey> peers,
                               Options options)
    : own_(std::move(own)), peers_(std::move(peers)), options_(options), owned_(own_.size()) {}

bool SharedIdleness::Gate(size_t i, bool eligible, int64_t position, int64_t end, int64_t end_asked_ms,
                          int64_t now_ms) {
  Own& o = owned_.at(i);
  if (o.finished) return true;
  if (!eligible) {
    // An active partition's position is nobody's business: only the move
    // from idle is posted, not every record.
    if (o.idle_posted) dirty_ = true;
    o = Own{.position = position};
    return false;
  }
  if (!o.idle_posted || o.position != position) {
    o = Own{.idle_posted = true, .position = position};
    dirty_ = true;
    return false;
  }
  if (o.open) return true;
  if (o.acked_ms < 0 || now_ms < o.acked_ms + options_.grace_ms) return false;
  // The check: an answer asked after the grace, with nothing past X.
  if (end_asked_ms < o.acked_ms + options_.grace_ms || end < 0 || end > position) return false;
  o.open = true;
  return true;
}

void SharedIdleness::Finish(size_t i) {
  Own& o = owned_.at(i);
  if (!o.finished) dirty_ = true;
  o = Own{.finished = true};
}

std::optional<SharedIdleness::Post> SharedIdleness::TakePost(int64_t now_ms) {
  if (posted_ms_ >= 0 && now_ms - posted_ms_ >= options_.refresh_ms) dirty_ = true;
  if (!dirty_ || post_out_ || own_.empty()) return std::nullopt;
  dirty_ = false;
  post_out_ = true;
  Post post{.version = ++version_};
  for (Own& o : owned_) {
    // A finished partition (bounded) says "active": others need not check
    // it, as its subtask sends nothing of it any more.
    if (o.idle_posted && o.idle_version == 0) o.idle_version = post.version;
    post.entries.push_back(BoardEntry{.idle = o.idle_posted, .position = o.position});
  }
  return post;
}

void SharedIdleness::OnPosted(int64_t version, bool ok, int64_t now_ms) {
  post_out_ = false;
  if (!ok) {
    dirty_ = true;
    return;
  }
  posted_ms_ = now_ms;
  for (Own& o : owned_) {
    if (o.idle_posted && o.idle_version != 0 && o.idle_version <= version && o.acked_ms < 0) o.acked_ms = now_ms;
  }
}

bool SharedIdleness::WantsEndCheck(int64_t now_ms) const {
  for (const Own& o : owned_) {
    if (o.idle_posted && !o.open && o.acked_ms >= 0 && now_ms >= o.acked_ms + options_.grace_ms) return true;
  }
  return false;
}

void SharedIdleness::OnRead(int64_t sent_ms, const std::optional<BoardRead>& read) {
  // Sent at or after the last request: that request's answer (a check's
  // board read may serve it).
  if (sent_ms >= read_sent_ms_) read_out_ = false;
  if (!read.has_value() || read->entries.size() != peers_.size()) return;
  if (sent_ms < last_read_sent_ms_) return;  // an older answer than the one held
  last_read_ = read;
  last_read_sent_ms_ = sent_ms;
}

bool SharedIdleness::PeersClear(int64_t now_ms) const {
  if (peers_.empty()) return true;
  if (!last_read_.has_value() || now_ms - last_read_sent_ms_ >= options_.grace_ms - options_.read_interval_ms) {
    return false;
  }
  for (const std::optional<BoardEntry>& entry : last_read_->entries) {
    if (!entry.has_value() || entry->idle) return false;  // not known yet, or idle
  }
  return true;
}

std::vector<std::string> SharedIdleness::IdlePeers() const {
  std::vector<std::string> names;
  if (!last_read_.has_value()) return names;
  for (size_t i = 0; i < peers_.size() && i < last_read_->entries.size(); ++i) {
    if (last_read_->entries[i].has_value() && last_read_->entries[i]->idle) names.push_back(Name(peers_[i]));
  }
  return names;
}

absl::StatusOr<std::unique_ptr<IdlenessBoard>> IdlenessBoard::Create(RdKafka::Conf& conf, const std::string& group,
                                                                     std::string client) {
  std::unique_ptr<IdlenessBoard> board(new IdlenessBoard());
  board->events_ = std::make_unique<ClientEvents>(std::move(client));
  std::string error;
  // No statistics: nobody reads them from this handle.
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"group.id", group},
           {"enable.auto.commit", "false"},
           {"client.id", "weir-kafka-idleness"},
           {"statistics.interval.ms", "0"}}) {
    if (conf.set(name, value, error) != RdKafka::Conf::CONF_OK) {
      return absl::InvalidArgumentError(absl::StrCat("idleness board: cannot set ", name, ": ", error));
    }
  }
  if (conf.set("event_cb", static_cast<RdKafka::EventCb*>(board->events_.get()), error) != RdKafka::Conf::CONF_OK) {
    return absl::InternalError(absl::StrCat("idleness board: cannot install the event callback: ", error));
  }
  board->consumer_.reset(RdKafka::KafkaConsumer::create(&conf, error));
  if (board->consumer_ == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("idleness board: cannot create a Kafka client: ", error));
  }
  return board;
}

IdlenessBoard::~IdlenessBoard() {
  if (consumer_ != nullptr) consumer_->close();
}

void IdlenessBoard::ServeEvents() {
  // Errors the handle reports wait in its main queue for a poll; served
  // here (to the event callback), so that they do not pile up.
  rd_kafka_poll(consumer_->c_ptr(), 0);
}

absl::Status IdlenessBoard::Post(const std::vector<TopicPartitionKey>& partitions,
                                 const std::vector<BoardEntry>& entries, int timeout_ms) {
  ServeEvents();
  PartitionList offsets(partitions.size());
  for (size_t i = 0; i < partitions.size() && i < entries.size(); ++i) {
    rd_kafka_topic_partition_t* tp =
        rd_kafka_topic_partition_list_add(offsets.list, partitions[i].first.c_str(), partitions[i].second);
    tp->offset = std::max<int64_t>(0, entries[i].position);
    const std::string metadata = BoardMetadata(entries[i].idle);
    // librdkafka frees it with the list.
    tp->metadata = std::malloc(metadata.size());
    if (tp->metadata == nullptr) return absl::ResourceExhaustedError("idleness board: out of memory");
    std::memcpy(tp->metadata, metadata.data(), metadata.size());
    tp->metadata_size = metadata.size();
  }
  // A synchronous commit waits for the coordinator's answer however long;
  // the queue form bounds it.
  rd_kafka_queue_t* queue = rd_kafka_queue_new(consumer_->c_ptr());
  rd_kafka_resp_err_t err = rd_kafka_commit_queue(consumer_->c_ptr(), offsets.list, queue, nullptr, nullptr);
  if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    rd_kafka_event_t* event = rd_kafka_queue_poll(queue, timeout_ms);
    if (event == nullptr) {
      err = RD_KAFKA_RESP_ERR__TIMED_OUT;
    } else {
      err = rd_kafka_event_error(event);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const rd_kafka_topic_partition_list_t* done = rd_kafka_event_topic_partition_list(event);
        for (int i = 0; done != nullptr && i < done->cnt; ++i) {
          if (done->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
            err = done->elems[i].err;
            break;
          }
        }
      }
      rd_kafka_event_destroy(event);
    }
  }
  rd_kafka_queue_destroy(queue);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("committing to the idleness board: ", rd_kafka_err2str(err)));
  }
  return absl::OkStatus();
}

absl::StatusOr<BoardRead> IdlenessBoard::Read(const std::vector<TopicPartitionKey>& partitions, int timeout_ms) {
  ServeEvents();
  PartitionList offsets(partitions.size());
  for (const TopicPartitionKey& tp : partitions) {
    rd_kafka_topic_partition_list_add(offsets.list, tp.first.c_str(), tp.second);
  }
  const rd_kafka_resp_err_t err = rd_kafka_committed(consumer_->c_ptr(), offsets.list, timeout_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("reading the idleness board: ", rd_kafka_err2str(err)));
  }
  BoardRead read;
  for (int i = 0; i < offsets.list->cnt; ++i) {
    const rd_kafka_topic_partition_t& tp = offsets.list->elems[i];
    if (tp.err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::UnavailableError(
          absl::StrCat("reading the idleness board: ", tp.topic, "[", tp.partition, "]: ", rd_kafka_err2str(tp.err)));
    }
    std::optional<bool> idle;
    if (tp.offset >= 0 && tp.metadata != nullptr) {
      idle = ParseBoardMetadata(absl::string_view(static_cast<const char*>(tp.metadata), tp.metadata_size));
    }
    read.entries.push_back(idle.has_value() ? std::optional<BoardEntry>(BoardEntry{*idle, tp.offset}) : std::nullopt);
  }
  if (read.entries.size() != partitions.size()) {
    return absl::InternalError("reading the idleness board: the answer lists other partitions");
  }
  return read;
}

}  // namespace weir::connectors::kafka_internal
