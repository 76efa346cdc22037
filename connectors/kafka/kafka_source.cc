#include "connectors/kafka/kafka_source.h"

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafkacpp.h>
#include <pthread.h>

#include <algorithm>
#include <map>
#include <random>
#include <stdexcept>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/check.h"
#include "common/logging/logging.h"
#include "connectors/kafka/kafka_client.h"
#include "weir/kafka.h"

namespace weir::connectors {
namespace {

using Clock = std::chrono::steady_clock;

// The steady clock in ms: what the shared idleness measures its waits by.
int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

// consume() waits at most this long, so the task thread stays responsive.
constexpr int kPollTimeoutMs = 100;
// Records one PollNext emits at most.
constexpr int kMaxBatch = 500;
// Bounded mode: how long without a record or end-of-partition, while
// librdkafka reports errors, before the source gives up.
constexpr auto kBoundedStallTimeout = std::chrono::seconds(60);
// Idleness: the brokers are asked for the end offsets at most this often
// while the watermark would move past an idle partition (it moves at most
// this often then, about a round trip behind).
constexpr int64_t kIdleCheckIntervalMs = 200;
// How long a request of the broker-requests thread may take.
constexpr int kBrokerRequestTimeoutMs = 1000;

// Owns librdkafka C++ TopicPartition objects.
struct TopicPartitionList {
  TopicPartitionList() = default;
  TopicPartitionList(const TopicPartitionList&) = delete;
  TopicPartitionList& operator=(const TopicPartitionList&) = delete;
  ~TopicPartitionList() { RdKafka::TopicPartition::destroy(items); }

  std::vector<RdKafka::TopicPartition*> items;
};

std::string GeneratedGroupId() {
  std::random_device random;
  std::uniform_int_distribution<uint64_t> bits;
  return absl::StrFormat("weir-%016x", bits(random));
}

std::string DescribeStart(const KafkaSourceConfig& config) {
  switch (config.start) {
    case KafkaSourceConfig::Start::kEarliest: return "earliest";
    case KafkaSourceConfig::Start::kLatest: return "latest";
    case KafkaSourceConfig::Start::kCommitted:
      return absl::StrCat("offsets committed by group '", config.group_id, "'");
    case KafkaSourceConfig::Start::kTimestamp:
      return absl::StrCat("timestamp ", config.start_timestamp_ms);
  }
  return "?";
}

std::string PartitionName(const std::string& topic, int32_t partition) {
  return absl::StrCat(topic, "[", partition, "]");
}

// An event time as the logs show it: UTC with ms.
std::string EventTimeText(int64_t ms) {
  if (ms == kMinWatermark) return "the start of time";
  if (ms == kMaxWatermark) return "the end of time";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

int RemainingMs(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(left, 0));
}

// One round of ListOffsetsUntil waits at most this long for its answers.
constexpr int kListOffsetsRoundMs = 2000;

// Answers that a partition leader moving (or down, or not yet known) gives.
bool LeaderMayMove(RdKafka::ErrorCode code) {
  switch (code) {
    case RdKafka::ERR__TIMED_OUT:
    case RdKafka::ERR__TRANSPORT:
    case RdKafka::ERR__ALL_BROKERS_DOWN:
    case RdKafka::ERR_LEADER_NOT_AVAILABLE:
    case RdKafka::ERR_NOT_LEADER_FOR_PARTITION:
    case RdKafka::ERR_REQUEST_TIMED_OUT:
    case RdKafka::ERR_BROKER_NOT_AVAILABLE:
    case RdKafka::ERR_REPLICA_NOT_AVAILABLE:
    case RdKafka::ERR_NETWORK_EXCEPTION:
    case RdKafka::ERR_KAFKA_STORAGE_ERROR:
    case RdKafka::ERR_FENCED_LEADER_EPOCH:
    case RdKafka::ERR_UNKNOWN_LEADER_EPOCH:
    case RdKafka::ERR_OFFSET_NOT_AVAILABLE:
      return true;
    default:
      return false;
  }
}

// ListOffsets at `timestamp` (-2: the oldest offset; -1: the next one, or
// under read_committed the last stable offset) for every partition of
// `partitions`, asked again until `deadline` while the answers say a leader
// is moving. The offsets in `partitions`' order; on failure kUnavailable
// saying what (the partition, the last answer).
//
// Not query_watermark_offsets: librdkafka (2.0.2) sends that to the leader
// it knew when called and waits for that broker however long it stays down,
// past its own timeout (a task started while a leader was SIGKILLed hung in
// DEPLOYING), and fails at the NOT_LEADER answer the broker gives once back.
// offsetsForTimes keeps to its timeout, and each round starts from metadata
// asked anew, which names the new leader once the controller moved it.
absl::StatusOr<std::vector<int64_t>> ListOffsetsUntil(RdKafka::KafkaConsumer& consumer,
                                                      const std::vector<std::pair<std::string, int32_t>>& partitions,
                                                      int64_t timestamp, Clock::time_point deadline) {
  for (bool first = true;; first = false) {
    if (!first) {
      // Fresh leaders for the next round (the known topics' metadata).
      RdKafka::Metadata* raw = nullptr;
      consumer.metadata(false, nullptr, &raw, std::max(1, std::min(RemainingMs(deadline), kListOffsetsRoundMs)));
      delete raw;
    }
    TopicPartitionList query;
    for (const auto& [topic, partition] : partitions) {
      query.items.push_back(RdKafka::TopicPartition::create(topic, partition, timestamp));
    }
    RdKafka::ErrorCode code =
        consumer.offsetsForTimes(query.items, std::max(1, std::min(RemainingMs(deadline), kListOffsetsRoundMs)));
    std::string error = RdKafka::err2str(code);
    if (code == RdKafka::ERR_NO_ERROR) {
      std::vector<int64_t> offsets;
      for (const RdKafka::TopicPartition* tp : query.items) {
        if (tp->err() != RdKafka::ERR_NO_ERROR || tp->offset() < 0) {
          code = tp->err() != RdKafka::ERR_NO_ERROR ? tp->err() : RdKafka::ERR_OFFSET_NOT_AVAILABLE;
          error = absl::StrCat(PartitionName(tp->topic(), tp->partition()), ": ", RdKafka::err2str(code));
          break;
        }
        offsets.push_back(tp->offset());
      }
      if (offsets.size() == partitions.size()) return offsets;
    }
    if (!LeaderMayMove(code) || RemainingMs(deadline) == 0) return absl::UnavailableError(error);
  }
}

}  // namespace

KafkaSource::KafkaSource(KafkaSourceConfig config)
    : config_(std::move(config)), log_(logging::Get("kafka")) {}

KafkaSource::~KafkaSource() { Close(); }

void KafkaSource::InitializeState(OperatorContext& context) {
  offsets_state_ = context.operator_state()->GetUnionListState("kafka-offsets");
  for (const std::string& entry : offsets_state_->Get()) {
    // "topic:partition:offset", and ":end" in bounded mode; topic names
    // cannot hold ':'.
    std::vector<std::string> parts = absl::StrSplit(entry, ':');
    int32_t partition = 0;
    int64_t offset = 0;
    int64_t end = 0;
    if ((parts.size() != 3 && parts.size() != 4) || !absl::SimpleAtoi(parts[1], &partition) ||
        !absl::SimpleAtoi(parts[2], &offset) || (parts.size() == 4 && !absl::SimpleAtoi(parts[3], &end))) {
      throw std::runtime_error(absl::StrCat("the checkpointed Kafka offset '", entry,
                                            "' is malformed (expected topic:partition:offset[:end])"));
    }
    restored_offsets_[{parts[0], partition}] = offset;
    if (parts.size() == 4) restored_end_offsets_[{parts[0], partition}] = end;
  }
}

void KafkaSource::SnapshotState(const CheckpointInfo&) {
  if (offsets_state_ == nullptr) return;
  std::vector<std::string> entries;
  entries.reserve(partitions_.size());
  for (const PartitionState& p : partitions_) {
    // Bounded: the end goes with the offset, so that a restarted job stops
    // where its first attempt would have, not at what the topic holds by then.
    entries.push_back(config_.bounded
                          ? absl::StrCat(p.topic, ":", p.partition, ":", p.next_offset, ":", p.end_offset)
                          : absl::StrCat(p.topic, ":", p.partition, ":", p.next_offset));
  }
  offsets_state_->Update(std::move(entries));
}

void KafkaSource::Open(OperatorContext& context, RecordOutput* output) {
  WEIR_CHECK(consumer_ == nullptr, "KafkaSource::Open called twice");
  WEIR_CHECK(output != nullptr, "KafkaSource::Open without an output");
  WEIR_CHECK(context.parallelism() >= 1 && context.subtask_index() >= 0 &&
                 context.subtask_index() < context.parallelism(),
             "bad subtask index or parallelism");
  output_ = output;
  client_ = absl::StrCat("KafkaSource '", context.operator_name(), "' subtask ",
                         context.subtask_index(), "/", context.parallelism());
  group_id_ = config_.group_id.empty() ? GeneratedGroupId() : config_.group_id;
  if (config_.at_most_once && config_.group_id.empty()) {
    // Where the newest position is kept must outlive this attempt.
    group_id_ = absl::StrCat("weir-", context.operator_name(), "-", absl::StrJoin(config_.topics, "."));
    for (char& c : group_id_) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    }
  }
  const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);

  CreateConsumer();

  absl::StatusOr<std::map<std::string, int32_t>> counts = kafka_internal::FetchPartitionCounts(
      *consumer_, config_.topics, config_.brokers, timeout_ms, *events_);
  if (!counts.ok()) throw std::runtime_error(std::string(counts.status().message()));

  // The map is sorted by topic, so `index` walks (topic, partition) in order.
  size_t index = 0;
  std::vector<kafka_internal::TopicPartitionKey> own;
  std::vector<kafka_internal::TopicPartitionKey> peers;
  for (const auto& [topic, count] : *counts) {
    for (int32_t partition = 0; partition < count; ++partition, ++index) {
      if (index % static_cast<size_t>(context.parallelism()) ==
          static_cast<size_t>(context.subtask_index())) {
        partitions_.push_back(PartitionState{.topic = topic, .partition = partition});
        own.emplace_back(topic, partition);
      } else {
        peers.emplace_back(topic, partition);
      }
    }
  }
  // A subtask without partitions is idle from its start: nothing to share.
  if (config_.event_time.has_value() && config_.event_time->idleness_ms > 0 && !peers.empty() && !own.empty()) {
    if (config_.event_time->shared_idleness_group.empty()) {
      log_->warn("{}: no job id to name the idleness board by, so this subtask judges idleness by its own "
                 "partitions only: another subtask's records may move event time past those of partitions "
                 "this one has still to read",
                 client_);
    } else {
      std::unique_ptr<RdKafka::Conf> conf = ConsumerConf();
      absl::StatusOr<std::unique_ptr<kafka_internal::IdlenessBoard>> board = kafka_internal::IdlenessBoard::Create(
          *conf, config_.event_time->shared_idleness_group, absl::StrCat(client_, " (idleness board)"));
      if (!board.ok()) throw std::runtime_error(absl::StrCat(client_, ": ", board.status().message()));
      board_ = *std::move(board);
      shared_.emplace(std::move(own), std::move(peers), kafka_internal::SharedIdleness::Options{});
      log_->info("{}: idleness shared with the other subtasks through consumer group '{}' ({} partitions of "
                 "theirs): a partition goes idle about {} ms after the idleness",
                 client_, config_.event_time->shared_idleness_group, shared_->peers().size(),
                 kafka_internal::SharedIdleness::Options{}.grace_ms);
    }
  }

  ResolveOffsets();
  AssignAndLog(index);
  // The lag gauges appear once the first fetch tells the high watermark.
  metrics_ = &context.metrics();
  lag_.assign(partitions_.size(), nullptr);
  last_progress_ = Clock::now();
  if (const auto& event_time = config_.event_time) {
    watermarks_.emplace(event_time->out_of_orderness_ms, event_time->idleness_ms);
    const int64_t now = weir::internal::WallClockMs();
    for (PartitionState& p : partitions_) {
      p.split = watermarks_->AddSplit(PartitionName(p.topic, p.partition), now);
      if (p.done) watermarks_->Finish(p.split);
    }
    dropped_ = &metrics_->counter("weir_event_time_dropped_records_total",
                                  "Records dropped for an invalid event time (missing, negative, or too far in the "
                                  "future).");
    log_->info("{}: event time from {}, watermarks per partition: out-of-orderness {} ms, idleness {}, invalid "
               "timestamps {}, partitions aligned {}",
               client_, event_time->extractor ? "the job's extractor" : "the Kafka record timestamps",
               event_time->out_of_orderness_ms,
               event_time->idleness_ms > 0 ? absl::StrCat(event_time->idleness_ms, " ms") : "off",
               event_time->drop_invalid ? "dropped" : "fail the job",
               event_time->max_drift_ms > 0 ? absl::StrCat("within ", event_time->max_drift_ms, " ms") : "off");
    if (partitions_.empty()) {
      log_->info("{}: no partition to read, so this subtask is idle and does not hold event time back", client_);
    }
  }
}

void KafkaSource::OnPeriodicEmit() {
  if (!watermarks_.has_value() || output_ == nullptr) return;
  const int64_t now = weir::internal::WallClockMs();
  bool limit_always = false;
  const int64_t limit =
      config_.event_time->idleness_ms > 0 ? CheckIdlePartitions(now, &limit_always) : kMaxWatermark;
  const weir::internal::SplitWatermarks::Combined combined = watermarks_->Combine(now, limit, limit_always);
  ReportPartitions(now, combined.watermark);
  if (config_.event_time->max_drift_ms > 0) AlignPartitions(now);
  emitter_.Emit(combined, output_);
}

int64_t KafkaSource::CheckIdlePartitions(int64_t now_ms, bool* limit_always) {
  std::optional<EndOffsetsAnswer> answer;
  std::optional<PostAnswer> posted;
  std::vector<BoardAnswer> reads;
  {
    absl::MutexLock lock(&requests_mutex_);
    answer.swap(ends_answered_);
    posted.swap(post_answered_);
    reads.swap(reads_answered_);
  }
  if (answer.has_value()) {
    ends_pending_ = false;
    for (size_t i = 0; i < partitions_.size() && i < answer->ends.size(); ++i) {
      if (answer->ends[i] < 0) continue;
      partitions_[i].broker_end = std::max(partitions_[i].broker_end, answer->ends[i]);
      partitions_[i].end_asked_ms = std::max(partitions_[i].end_asked_ms, answer->asked_ms);
    }
    if (answer->ok) {
      ends_cover_ = std::max(ends_cover_, answer->covers);
    } else if (!answer->error.empty()) {
      if (int64_t suppressed = 0; ends_log_limiter_.ShouldLog(&suppressed)) {
        log_->warn("{}: could not ask the brokers for the end offsets: {}; event time waits on the idle "
                   "partitions until they answer ({} similar messages suppressed)",
                   client_, answer->error, suppressed);
      }
    } else {
      log_->debug("{}: event time waits: {}", client_, answer->peers_behind);
    }
  }
  const int64_t steady_ms = SteadyMs();
  if (shared_.has_value()) {
    if (posted.has_value()) {
      shared_->OnPosted(posted->version, posted->error.empty(), posted->at_ms);
      if (int64_t suppressed = 0; !posted->error.empty() && board_log_limiter_.ShouldLog(&suppressed)) {
        log_->warn("{}: {}; this subtask's quiet partitions stay active (holding event time) until it can tell "
                   "the others ({} similar messages suppressed)",
                   client_, posted->error, suppressed);
      }
    }
    for (const BoardAnswer& read : reads) {
      shared_->OnRead(read.sent_ms, read.read);
      if (int64_t suppressed = 0; !read.error.empty() && board_log_limiter_.ShouldLog(&suppressed)) {
        log_->warn("{}: {}; event time waits until the other subtasks' idle partitions are known ({} similar "
                   "messages suppressed)",
                   client_, read.error, suppressed);
      }
    }
  }
  for (size_t i = 0; i < partitions_.size(); ++i) {
    PartitionState& p = partitions_[i];
    if (p.done) {
      if (shared_.has_value()) shared_->Finish(i);
      continue;
    }
    int64_t end = p.broker_end;
    if (!config_.read_committed) {
      // As of the last fetch, without a request. Under read_committed the
      // high watermark also counts open transactions and the markers, so
      // only the brokers' last stable offset tells there.
      int64_t low = 0;
      int64_t high = -1;
      if (consumer_->get_watermark_offsets(p.topic, p.partition, &low, &high) == RdKafka::ERR_NO_ERROR) {
        end = std::max(end, high);
      }
    }
    p.backlog = std::max<int64_t>(0, end - p.next_offset);
    // Caught up: the last fetch found nothing after the position (the
    // end-of-partition event, past any marker), and nothing known since.
    watermarks_->SetCaughtUp(p.split, p.at_end && p.backlog == 0);
    if (shared_.has_value()) {
      // Idle only once the others were told (shared_idleness.h).
      const bool open = shared_->Gate(i, watermarks_->eligible(p.split, now_ms), p.next_offset, p.broker_end,
                                      p.end_asked_ms, steady_ms);
      watermarks_->SetIdleGate(p.split, open);
    }
  }
  bool check = false;  // an end offsets' answer asked from now on is needed
  if (shared_.has_value()) {
    if (std::optional<kafka_internal::SharedIdleness::Post> post = shared_->TakePost(steady_ms)) PostToBoard(*std::move(post));
    check = shared_->WantsEndCheck(steady_ms);
    if (shared_->WantsRead(steady_ms)) {
      shared_->OnReadSent(steady_ms);
      ReadBoard(steady_ms);
    }
    // Another subtask has an idle partition (or what they have is not
    // known lately): every move needs a check.
    *limit_always = !shared_->PeersClear(steady_ms);
  }
  const bool passing = *limit_always || !watermarks_->Passing(now_ms).empty();
  // The watermark would pass an idle partition: only as far as an answer
  // asked after the records that move it were read.
  const int64_t candidate = passing ? watermarks_->Candidate(now_ms) : kMinWatermark;
  if ((check || candidate > ends_cover_) && !ends_pending_ && steady_ms - ends_asked_ms_ >= kIdleCheckIntervalMs) {
    ends_pending_ = true;
    ends_asked_ms_ = steady_ms;
    QueryEndOffsets(candidate);
  }
  return passing ? ends_cover_ : kMaxWatermark;
}

void KafkaSource::AlignPartitions(int64_t now_ms) {
  // A partition with nothing to read holds nobody back: one at its end
  // (librdkafka said so, past any transaction marker), or, for one that
  // gets neither records nor an end (its leader unreachable), after the
  // source has waited this long on an empty queue since its last word.
  constexpr int64_t kQuietMs = 1000;
  const int64_t drift = config_.event_time->max_drift_ms;
  // The slowest partition still being read.
  const PartitionState* slowest = nullptr;
  int64_t floor = 0;
  for (const PartitionState& p : partitions_) {
    if (p.done || p.at_end || watermarks_->idle(p.split, now_ms) || starved_ms_ - p.starved_mark_ms >= kQuietMs) {
      continue;
    }
    const int64_t watermark = watermarks_->watermark(p.split);
    if (slowest == nullptr || watermark < floor) {
      slowest = &p;
      floor = watermark;
    }
  }
  std::vector<PartitionState*> pause;
  std::vector<PartitionState*> resume;
  for (PartitionState& p : partitions_) {
    if (p.done) continue;
    const int64_t watermark = watermarks_->watermark(p.split);
    // floor is kMinWatermark (the slowest has no record yet) or a time.
    // Paused beyond the drift, resumed within half of it.
    const int64_t limit = p.aligned_paused ? drift / 2 : drift;
    const bool ahead = slowest != nullptr && watermark != kMinWatermark && watermark - limit > floor;
    if (ahead == p.aligned_paused) continue;
    (ahead ? pause : resume).push_back(&p);
    if (!ahead) continue;
    // The first pause is logged; later ones only at debug level, and their
    // text is built only then (pauses come every few polls).
    ++aligned_pauses_;
    if (aligned_pauses_ > 1 && !log_->should_log(spdlog::level::debug)) continue;
    const std::string why =
        absl::StrCat(client_, ": partition ", PartitionName(p.topic, p.partition), " paused: its watermark ",
                     EventTimeText(watermark), " is more than watermark.max-drift-ms (", drift,
                     " ms) ahead of partition ", PartitionName(slowest->topic, slowest->partition), "'s (",
                     EventTimeText(floor), "); it resumes when within ", drift / 2, " ms of the slowest partition");
    log_->log(aligned_pauses_ == 1 ? spdlog::level::info : spdlog::level::debug, "{}", why);
  }
  PauseOrResume(pause, /*pause=*/true, now_ms);
  PauseOrResume(resume, /*pause=*/false, now_ms);
}

void KafkaSource::PauseOrResume(const std::vector<PartitionState*>& partitions, bool pause, int64_t now_ms) {
  if (partitions.empty()) return;
  TopicPartitionList list;
  for (const PartitionState* p : partitions) {
    list.items.push_back(RdKafka::TopicPartition::create(p->topic, p->partition));
  }
  const RdKafka::ErrorCode code = pause ? consumer_->pause(list.items) : consumer_->resume(list.items);
  for (size_t i = 0; i < partitions.size(); ++i) {
    const RdKafka::ErrorCode item = code != RdKafka::ERR_NO_ERROR ? code : list.items[i]->err();
    if (item == RdKafka::ERR_NO_ERROR) {
      PartitionState& p = *partitions[i];
      p.aligned_paused = pause;
      // Held back on purpose, so it does not go idle while paused (one
      // idle already stays so).
      watermarks_->Hold(p.split, pause && !watermarks_->idle(p.split, now_ms), now_ms);
      // A resumed partition waits for its next fetch; that wait does not
      // make it quiet.
      if (!pause) p.starved_mark_ms = starved_ms_;
      continue;
    }
    int64_t suppressed = 0;
    if (align_log_limiter_.ShouldLog(&suppressed)) {
      log_->warn("{}: could not {} {} for watermark alignment: {}; will retry at the next watermark tick "
                 "({} similar messages suppressed)",
                 client_, pause ? "pause" : "resume", Describe(*partitions[i]), RdKafka::err2str(item),
                 suppressed);
    }
  }
}

void KafkaSource::ReportPartitions(int64_t now_ms, int64_t combined_watermark) {
  const KafkaSourceConfig::EventTime& event_time = *config_.event_time;
  // The furthest partition, for the stall warning.
  int64_t ahead = kMinWatermark;
  const PartitionState* leader = nullptr;
  for (const PartitionState& p : partitions_) {
    if (!p.done && watermarks_->watermark(p.split) > ahead) {
      ahead = watermarks_->watermark(p.split);
      leader = &p;
    }
  }
  for (PartitionState& p : partitions_) {
    const int64_t watermark = watermarks_->watermark(p.split);
    if (watermark != kMinWatermark) {
      if (p.watermark_gauge == nullptr) {
        p.watermark_gauge = &metrics_->gauge(
            "weir_kafka_partition_watermark_ms",
            "The partition's watermark (its largest event time minus the out-of-orderness), Unix ms.",
            {{"topic", p.topic}, {"partition", absl::StrCat(p.partition)}});
      }
      p.watermark_gauge->Set(static_cast<double>(watermark));
    }
    if (p.done) continue;
    const int64_t quiet_ms = now_ms - watermarks_->last_record_ms(p.split);
    const bool idle = watermarks_->idle(p.split, now_ms);
    if (idle != p.idle) {
      p.idle = idle;
      if (idle) {
        log_->info("{}: partition {} idle (no record for {} ms, caught up with the broker at offset {}): event "
                   "time advances without it",
                   client_, PartitionName(p.topic, p.partition), quiet_ms, p.next_offset);
      } else if (p.backlog > 0) {
        log_->info("{}: partition {} active again: has {} records at the broker", client_,
                   PartitionName(p.topic, p.partition), p.backlog);
      } else {
        log_->info("{}: partition {} active again: records came", client_, PartitionName(p.topic, p.partition));
      }
    }
    const bool holding = watermark <= combined_watermark && leader != nullptr && ahead > watermark;
    if (!idle && holding && event_time.stall_warning_ms > 0 && quiet_ms >= event_time.stall_warning_ms &&
        !p.stall_reported) {
      p.stall_reported = true;
      log_->warn("{}: partition {} has had no record for {} s and holds the watermark at {} while partition {} is "
                 "at {}; set the watermark strategy's idleness if it may stay quiet",
                 client_, PartitionName(p.topic, p.partition), quiet_ms / 1000, EventTimeText(watermark),
                 PartitionName(leader->topic, leader->partition), EventTimeText(ahead));
    }
  }
}

bool KafkaSource::EventTimeOf(const PartitionState& partition, const kafka::Record& record, int64_t* timestamp) {
  const KafkaSourceConfig::EventTime& event_time = *config_.event_time;
  *timestamp = config_.timestamp_extractor ? config_.timestamp_extractor(&record)
               : record.timestamp_ms >= 0  ? record.timestamp_ms
                                           : kNoTimestamp;
  const std::string invalid =
      weir::internal::CheckTimestamp(*timestamp, now_ms_, std::chrono::milliseconds(event_time.max_future_ms));
  if (invalid.empty()) return true;
  const std::string where = absl::StrCat("the record at offset ", record.offset, " of partition ",
                                         PartitionName(partition.topic, partition.partition));
  if (!event_time.drop_invalid) {
    throw weir::UnrecoverableError(absl::StrCat(
        client_, ": ", where, " has no usable event time: ", invalid,
        "; fix the producer's timestamps (or the extractor), or set the watermark strategy's invalid_timestamps "
        "to kDrop to drop such records"));
  }
  dropped_->Inc();
  int64_t suppressed = 0;
  if (drop_log_limiter_.ShouldLog(&suppressed)) {
    log_->warn("{}: dropped {}: {} ({} more dropped since the last message)", client_, where, invalid, suppressed);
  }
  return false;
}

void KafkaSource::UpdateLag() {
  for (size_t i = 0; i < partitions_.size() && i < lag_.size(); ++i) {
    const PartitionState& p = partitions_[i];
    int64_t low = 0;
    int64_t high = -1;
    if (consumer_->get_watermark_offsets(p.topic, p.partition, &low, &high) != RdKafka::ERR_NO_ERROR || high < 0) {
      continue;  // no fetch answered yet
    }
    if (lag_[i] == nullptr) {
      lag_[i] = &metrics_->gauge("weir_kafka_consumer_lag_records",
                                 "Records between the source's position and the partition's high watermark as "
                                 "last fetched.",
                                 {{"topic", p.topic}, {"partition", absl::StrCat(p.partition)}});
    }
    lag_[i]->Set(static_cast<double>(std::max<int64_t>(0, high - p.next_offset)));
  }
}

std::unique_ptr<RdKafka::Conf> KafkaSource::ConsumerConf() const {
  using kafka_internal::SetOrThrow;
  std::unique_ptr<RdKafka::Conf> conf(RdKafka::Conf::create(RdKafka::Conf::CONF_GLOBAL));
  // Defaults the extras may override.
  SetOrThrow(*conf, "client.id", "weir-kafka-source");
  // A committed offset that no longer exists (retention) restarts at the
  // oldest record rather than skipping to the newest.
  SetOrThrow(*conf, "auto.offset.reset", "earliest");
  for (const auto& [name, value] : config_.memory_properties) SetOrThrow(*conf, name, value);
  for (const auto& [name, value] : config_.kafka_properties) SetOrThrow(*conf, name, value);
  // What the source relies on; FromProperties refuses extras for these.
  SetOrThrow(*conf, "bootstrap.servers", config_.brokers);
  SetOrThrow(*conf, "group.id", group_id_);
  SetOrThrow(*conf, "enable.auto.commit", "false");
  SetOrThrow(*conf, "enable.partition.eof", "true");
  SetOrThrow(*conf, "isolation.level", config_.read_committed ? "read_committed" : "read_uncommitted");
  return conf;
}

void KafkaSource::CreateConsumer() {
  events_ = std::make_unique<kafka_internal::ClientEvents>(client_);
  std::unique_ptr<RdKafka::Conf> conf = ConsumerConf();
  std::string error;
  if (conf->set("event_cb", static_cast<RdKafka::EventCb*>(events_.get()), error) !=
      RdKafka::Conf::CONF_OK) {
    throw std::runtime_error(absl::StrCat("cannot install the event callback: ", error));
  }
  consumer_.reset(RdKafka::KafkaConsumer::create(conf.get(), error));
  if (!consumer_) {
    throw std::runtime_error(absl::StrCat("cannot create a Kafka consumer for brokers ",
                                          config_.brokers, ": ", error));
  }
  for (const char* threshold : {"queued.min.messages", "queued.max.messages.kbytes"}) {
    if (config_.memory_properties.contains(threshold) || config_.kafka_properties.contains(threshold)) {
      wake_fetchers_ = true;
    }
  }
  if (wake_fetchers_) consumer_queue_ = rd_kafka_queue_get_consumer(consumer_->c_ptr());
}

void KafkaSource::ResolveOffsets() {
  const int timeout_ms = kafka_internal::OpenTimeoutMs(config_.kafka_properties);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto fail = [&](const std::string& what, const std::string& error) {
    throw std::runtime_error(absl::StrCat("cannot read ", what, " from Kafka brokers at ",
                                          config_.brokers, " within ",
                                          kafka_internal::SecondsText(timeout_ms), ": ", error));
  };

  // The oldest and the next offset of each partition. Under read_committed
  // the broker answers "next" with the last stable offset, so a bounded read
  // never waits for a transaction still open at start.
  // Retried while a leader moves, within the open timeout (ListOffsetsUntil).
  std::vector<std::pair<int64_t, int64_t>> watermarks;
  if (!partitions_.empty()) {
    std::vector<std::pair<std::string, int32_t>> names;
    for (const PartitionState& p : partitions_) names.emplace_back(p.topic, p.partition);
    absl::StatusOr<std::vector<int64_t>> oldest =
        ListOffsetsUntil(*consumer_, names, RdKafka::Topic::OFFSET_BEGINNING, deadline);
    if (!oldest.ok()) {
      fail(absl::StrCat("the oldest offsets of ", partitions_.size(), " partitions"),
           std::string(oldest.status().message()));
    }
    absl::StatusOr<std::vector<int64_t>> next = ListOffsetsUntil(*consumer_, names, RdKafka::Topic::OFFSET_END, deadline);
    if (!next.ok()) {
      fail(absl::StrCat("the end offsets of ", partitions_.size(), " partitions"), std::string(next.status().message()));
    }
    for (size_t i = 0; i < partitions_.size(); ++i) watermarks.emplace_back((*oldest)[i], (*next)[i]);
  }

  TopicPartitionList query;
  for (const PartitionState& p : partitions_) {
    query.items.push_back(RdKafka::TopicPartition::create(p.topic, p.partition));
  }
  // At-most-once: the newest position reached before a failure.
  TopicPartitionList reached;
  if (config_.at_most_once && !partitions_.empty()) {
    for (const PartitionState& p : partitions_) {
      reached.items.push_back(RdKafka::TopicPartition::create(p.topic, p.partition));
    }
    const RdKafka::ErrorCode code = consumer_->committed(reached.items, std::max(1, RemainingMs(deadline)));
    if (code != RdKafka::ERR_NO_ERROR) {
      fail(absl::StrCat("the offsets committed by consumer group '", group_id_, "' (at-most-once)"),
           RdKafka::err2str(code));
    }
  }
  if (config_.start == KafkaSourceConfig::Start::kCommitted && !partitions_.empty()) {
    const RdKafka::ErrorCode code =
        consumer_->committed(query.items, std::max(1, RemainingMs(deadline)));
    if (code != RdKafka::ERR_NO_ERROR) {
      fail(absl::StrCat("the offsets committed by consumer group '", group_id_, "'"),
           RdKafka::err2str(code));
    }
  } else if (config_.start == KafkaSourceConfig::Start::kTimestamp && !partitions_.empty()) {
    for (RdKafka::TopicPartition* tp : query.items) tp->set_offset(config_.start_timestamp_ms);
    const RdKafka::ErrorCode code =
        consumer_->offsetsForTimes(query.items, std::max(1, RemainingMs(deadline)));
    if (code != RdKafka::ERR_NO_ERROR) {
      fail(absl::StrCat("the offsets for timestamp ", config_.start_timestamp_ms),
           RdKafka::err2str(code));
    }
  }

  // Bounded: partitions whose end the restored state lacks.
  std::vector<std::string> asked_ends;
  for (size_t i = 0; i < partitions_.size(); ++i) {
    PartitionState& p = partitions_[i];
    const auto [low, high] = watermarks[i];
    const RdKafka::TopicPartition& answer = *query.items[i];
    WEIR_CHECK(answer.topic() == p.topic && answer.partition() == p.partition,
               "librdkafka reordered the partition list");
    switch (config_.start) {
      case KafkaSourceConfig::Start::kEarliest:
        p.next_offset = low;
        break;
      case KafkaSourceConfig::Start::kLatest:
        p.next_offset = high;
        break;
      case KafkaSourceConfig::Start::kCommitted:
        if (answer.err() != RdKafka::ERR_NO_ERROR) {
          fail(absl::StrCat("the offset committed by group '", group_id_, "' for ", Describe(p)),
               RdKafka::err2str(answer.err()));
        }
        // Negative: nothing committed for this partition.
        p.next_offset = answer.offset() >= 0 ? answer.offset() : low;
        break;
      case KafkaSourceConfig::Start::kTimestamp:
        if (answer.err() != RdKafka::ERR_NO_ERROR) {
          fail(absl::StrCat("the offset for timestamp ", config_.start_timestamp_ms, " of ",
                            Describe(p)),
               RdKafka::err2str(answer.err()));
        }
        // Negative: no record at or after the timestamp yet.
        p.next_offset = answer.offset() >= 0 ? answer.offset() : high;
        break;
    }
    if (auto it = restored_offsets_.find({p.topic, p.partition}); it != restored_offsets_.end()) {
      p.next_offset = it->second;
      p.restored = true;
    }
    if (config_.at_most_once) {
      for (const RdKafka::TopicPartition* tp : reached.items) {
        if (tp->topic() != p.topic || tp->partition() != p.partition) continue;
        if (tp->err() == RdKafka::ERR_NO_ERROR && tp->offset() > p.next_offset) {
          p.next_offset = tp->offset();  // never read a record twice
          p.restored = false;
        }
      }
    }
    if (config_.bounded) {
      if (auto it = restored_end_offsets_.find({p.topic, p.partition}); it != restored_end_offsets_.end()) {
        p.end_offset = it->second;
        if (p.end_offset > high) {
          log_->warn("{}: the checkpointed end offset {} of {} lies beyond its end on the brokers now ({}): the "
                     "source waits for records up to it (was the topic deleted and created again?)",
                     client_, p.end_offset, Describe(p), high);
        }
      } else {
        p.end_offset = high;
        if (!restored_offsets_.empty()) {
          asked_ends.push_back(absl::StrCat(PartitionName(p.topic, p.partition), " ", high));
        }
      }
      p.done = p.next_offset >= p.end_offset;
    }
  }
  if (!asked_ends.empty()) {
    log_->info("{}: bounded, restored without an end offset for {} (a new partition, or state written by an "
               "unbounded source): reading up to the brokers' end offsets now: {}",
               client_, asked_ends.size() == 1 ? "one partition" : absl::StrCat(asked_ends.size(), " partitions"),
               absl::StrJoin(asked_ends, ", "));
  }
  partitions_left_ = static_cast<size_t>(
      std::count_if(partitions_.begin(), partitions_.end(),
                    [](const PartitionState& p) { return !p.done; }));
}

void KafkaSource::AssignAndLog(size_t total_partitions) {
  TopicPartitionList assignment;
  std::vector<std::string> described;
  for (const PartitionState& p : partitions_) {
    if (config_.bounded) {
      described.push_back(absl::StrCat(p.topic, "[", p.partition, "] ", p.next_offset, "..",
                                       p.end_offset, p.done ? " (nothing to read)" : ""));
    } else {
      described.push_back(absl::StrCat(p.topic, "[", p.partition, "] from ", p.next_offset,
                                       p.restored ? " (checkpoint)" : ""));
    }
    if (!p.done) {
      assignment.items.push_back(
          RdKafka::TopicPartition::create(p.topic, p.partition, p.next_offset));
    }
  }
  if (!assignment.items.empty()) {
    const RdKafka::ErrorCode code = consumer_->assign(assignment.items);
    if (code != RdKafka::ERR_NO_ERROR) {
      throw std::runtime_error(absl::StrCat("cannot assign Kafka partitions: ",
                                            RdKafka::err2str(code)));
    }
  }
  log_->info("{}: reading {} of the {} partitions of {} from brokers {} ({}, {}, {}): {}", client_,
             partitions_.size(), total_partitions, absl::StrJoin(config_.topics, ","),
             config_.brokers, DescribeStart(config_),
             config_.read_committed ? "read_committed" : "read_uncommitted",
             config_.bounded ? "bounded, up to the end offsets shown" : "unbounded",
             described.empty() ? "none" : absl::StrJoin(described, ", "));
}

SourceStatus KafkaSource::PollNext() {
  WEIR_CHECK(consumer_ != nullptr, "KafkaSource::PollNext before Open or after Close");
  if (watermarks_.has_value()) now_ms_ = weir::internal::WallClockMs();
  bool progress = false;
  std::vector<std::unique_ptr<RdKafka::Message>> batch;  // at-most-once: emitted after the commit
  for (int i = 0; i < kMaxBatch; ++i) {
    if (config_.bounded && partitions_left_ == 0) break;
    const auto asked = i == 0 ? Clock::now() : Clock::time_point();
    std::unique_ptr<RdKafka::Message> message(consumer_->consume(i == 0 ? kPollTimeoutMs : 0));
    const RdKafka::ErrorCode code = message->err();
    if (code == RdKafka::ERR__TIMED_OUT) {
      if (i == 0) starved_ms_ += std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - asked).count();
      break;
    }
    if (!heard_) {
      // Quiet time counts from the first answer of a fetch, not from the
      // wait for it.
      heard_ = true;
      for (PartitionState& p : partitions_) p.starved_mark_ms = starved_ms_;
    }
    if (code == RdKafka::ERR_NO_ERROR) {
      if (config_.at_most_once) {
        batch.push_back(std::move(message));
      } else {
        EmitRecord(*message);
      }
      progress = true;
    } else if (code == RdKafka::ERR__PARTITION_EOF) {
      // At-most-once: the batch's records come out after the commit, so the
      // end that follows them is handled after them too (in bounded mode
      // it finishes the partition, which would drop them).
      if (!batch.empty()) {
        batch.push_back(std::move(message));
      } else {
        HandleEndOfPartition(*message);
      }
      progress = true;
    } else {
      HandleConsumeError(*message);
      break;
    }
  }
  ThrowIfFatal();
  if (!batch.empty()) EmitAfterCommit(batch);
  if (wake_fetchers_) MaybeWakeFetchers(/*queue_ran_empty=*/!progress);
  const auto now = Clock::now();
  if (now - last_lag_update_ >= std::chrono::seconds(1)) {
    last_lag_update_ = now;
    UpdateLag();
  }

  if (config_.bounded && partitions_left_ == 0) {
    if (!finished_logged_) {
      finished_logged_ = true;
      log_->info("{}: reached the end offsets after {} records", client_, records_read_);
    }
    return SourceStatus::kEndOfInput;
  }
  if (progress) {
    last_progress_ = now;
    events_->ClearLastError();
    return SourceStatus::kMoreAvailable;
  }
  ThrowIfStalled();
  return SourceStatus::kNothingAvailable;
}

KafkaSource::PartitionState* KafkaSource::Find(RdKafka::Message& message) {
  const rd_kafka_message_t* raw = message.c_ptr();
  if (raw == nullptr || raw->rkt == nullptr) return nullptr;
  const char* topic = rd_kafka_topic_name(raw->rkt);
  auto matches = [&](const PartitionState& p) {
    return p.partition == raw->partition && p.topic == topic;
  };
  // Messages come in runs from one partition: try the last one first.
  if (last_found_ < partitions_.size() && matches(partitions_[last_found_])) {
    return &partitions_[last_found_];
  }
  for (size_t i = 0; i < partitions_.size(); ++i) {
    if (matches(partitions_[i])) {
      last_found_ = i;
      return &partitions_[i];
    }
  }
  return nullptr;
}

void KafkaSource::EmitAfterCommit(std::vector<std::unique_ptr<RdKafka::Message>>& batch) {
  // The offset after the last record of the batch, per partition, made
  // durable in the group before any record of the batch leaves.
  std::map<std::pair<std::string, int32_t>, int64_t> next;
  for (const auto& m : batch) {
    if (m->err() == RdKafka::ERR__PARTITION_EOF) continue;
    int64_t& offset = next[{m->topic_name(), m->partition()}];
    offset = std::max(offset, m->offset() + 1);
  }
  TopicPartitionList commit;
  for (const auto& [tp, offset] : next) {
    commit.items.push_back(RdKafka::TopicPartition::create(tp.first, tp.second, offset));
  }
  const RdKafka::ErrorCode code = consumer_->commitSync(commit.items);
  if (code != RdKafka::ERR_NO_ERROR) {
    // Nothing of the batch was emitted: a restart reads it again.
    throw std::runtime_error(absl::StrCat(client_, ": cannot commit offsets to consumer group '", group_id_,
                                          "' before emitting (at-most-once): ", RdKafka::err2str(code)));
  }
  for (auto& m : batch) {
    if (m->err() == RdKafka::ERR__PARTITION_EOF) {
      HandleEndOfPartition(*m);
    } else {
      EmitRecord(*m);
    }
  }
}

bool KafkaSource::EmitRecord(RdKafka::Message& message) {
  PartitionState* state = Find(message);
  if (state == nullptr) {
    log_->debug("{}: ignoring a record of {} [{}], which is not assigned here", client_,
                message.topic_name(), message.partition());
    return false;
  }
  if (state->done) return false;
  const int64_t offset = message.offset();
  if (config_.bounded && offset >= state->end_offset) {
    MarkDone(*state);
    return false;
  }

  kafka::Record record;
  if (const void* key = message.key_pointer(); key != nullptr) {
    record.key.emplace(static_cast<const char*>(key), message.key_len());
  }
  if (const void* payload = message.payload(); payload != nullptr) {
    record.value.assign(static_cast<const char*>(payload), message.len());
  }
  const RdKafka::MessageTimestamp timestamp = message.timestamp();
  record.timestamp_ms = timestamp.type == RdKafka::MessageTimestamp::MSG_TIMESTAMP_NOT_AVAILABLE
                            ? -1
                            : timestamp.timestamp;
  record.topic = state->topic;
  record.partition = state->partition;
  record.offset = offset;

  state->next_offset = offset + 1;
  state->at_end = false;
  state->starved_mark_ms = starved_ms_;
  ++records_read_;
  if (watermarks_.has_value()) {
    int64_t event_time = kNoTimestamp;
    const bool valid = EventTimeOf(*state, record, &event_time);
    // A dropped record still counts as activity of its partition.
    watermarks_->OnRecord(state->split, valid ? event_time : kNoTimestamp, now_ms_);
    // An idle subtask says ACTIVE before its records, not at its next tick:
    // downstream then waits for it before other subtasks' watermarks pass.
    if (emitter_.idle()) emitter_.Activate(output_);
    state->stall_reported = false;
    if (valid) output_->EmitAt(&record, event_time);
  } else if (record.timestamp_ms >= 0) {
    // Without a strategy the record's Kafka timestamp (CreateTime or
    // LogAppendTime) is still its event time, for a strategy downstream.
    output_->EmitAt(&record, record.timestamp_ms);
  } else {
    output_->Emit(&record);
  }
  if (config_.bounded && state->next_offset >= state->end_offset) MarkDone(*state);
  return true;
}

void KafkaSource::HandleEndOfPartition(RdKafka::Message& message) {
  PartitionState* state = Find(message);
  if (state == nullptr) return;
  // The end-of-partition offset is the fetch position, which lies past any
  // control records (transaction markers) and aborted records the consumer
  // skipped; the last record's offset + 1 may not.
  state->next_offset = std::max(state->next_offset, message.offset());
  state->at_end = true;
  state->starved_mark_ms = starved_ms_;
  log_->debug("{}: end of {} at offset {}", client_, Describe(*state), message.offset());
  if (config_.bounded && !state->done && state->next_offset >= state->end_offset) {
    MarkDone(*state);
  }
}

void KafkaSource::HandleConsumeError(RdKafka::Message& message) {
  const RdKafka::ErrorCode code = message.err();
  const std::string where =
      message.topic_name().empty()
          ? std::string()
          : absl::StrCat(" (topic '", message.topic_name(), "' partition ", message.partition(), ")");
  switch (code) {
    case RdKafka::ERR__FATAL: {
      std::string reason;
      consumer_->fatal_error(reason);
      throw std::runtime_error(absl::StrCat("fatal Kafka consumer error: ", reason));
    }
    case RdKafka::ERR__UNKNOWN_TOPIC:
    case RdKafka::ERR__UNKNOWN_PARTITION:
    case RdKafka::ERR_UNKNOWN_TOPIC_OR_PART:
      throw std::runtime_error(absl::StrCat(
          "Kafka topic '", message.topic_name(), "' partition ", message.partition(),
          " no longer exists on brokers ", config_.brokers, " (was it deleted?): ",
          message.errstr()));
    case RdKafka::ERR_TOPIC_AUTHORIZATION_FAILED:
    case RdKafka::ERR_GROUP_AUTHORIZATION_FAILED:
    case RdKafka::ERR__AUTHENTICATION:
    case RdKafka::ERR_SASL_AUTHENTICATION_FAILED:
    case RdKafka::ERR__SSL:
    case RdKafka::ERR__AUTO_OFFSET_RESET:
    case RdKafka::ERR_OFFSET_OUT_OF_RANGE:
      throw std::runtime_error(absl::StrCat("Kafka consumer error", where, " from brokers ",
                                            config_.brokers, ": ", message.errstr()));
    default: {
      // Connection trouble and the like: librdkafka retries by itself.
      int64_t suppressed = 0;
      if (error_log_limiter_.ShouldLog(&suppressed)) {
        log_->warn("{}: Kafka consumer error{}: {} ({} similar messages suppressed)", client_,
                   where, message.errstr(), suppressed);
      }
    }
  }
}

void KafkaSource::MarkDone(PartitionState& partition) {
  partition.done = true;
  if (watermarks_.has_value()) watermarks_->Finish(partition.split);
  --partitions_left_;
  log_->debug("{}: finished {} at offset {}", client_, Describe(partition),
              partition.next_offset);
  // Stop fetching what the source would drop anyway.
  TopicPartitionList pause;
  pause.items.push_back(RdKafka::TopicPartition::create(partition.topic, partition.partition));
  consumer_->pause(pause.items);
}

void KafkaSource::ThrowIfFatal() const {
  if (std::string fatal = events_->fatal_error(); !fatal.empty()) {
    throw std::runtime_error(absl::StrCat("fatal Kafka consumer error: ", fatal));
  }
}

void KafkaSource::ThrowIfStalled() {
  if (!config_.bounded) return;
  const auto idle = Clock::now() - last_progress_;
  if (idle < kBoundedStallTimeout) return;
  const std::string error = events_->last_error();
  if (error.empty()) return;
  throw std::runtime_error(absl::StrCat(
      "no progress reading from Kafka brokers at ", config_.brokers, " for ",
      std::chrono::duration_cast<std::chrono::seconds>(idle).count(), " s with ", partitions_left_,
      " partitions unfinished; last error: ", error));
}

std::string KafkaSource::Describe(const PartitionState& partition) const {
  return absl::StrCat("topic '", partition.topic, "' partition ", partition.partition);
}

std::map<std::pair<std::string, int32_t>, int64_t> KafkaSource::CurrentOffsets() const {
  std::map<std::pair<std::string, int32_t>, int64_t> offsets;
  for (const PartitionState& p : partitions_) offsets[{p.topic, p.partition}] = p.next_offset;
  return offsets;
}

void KafkaSource::MaybeWakeFetchers(bool queue_ran_empty) {
  // Below this peak the queue is not what holds the fetcher back.
  constexpr size_t kMinPeak = 8;
  const size_t length = rd_kafka_queue_length(consumer_queue_);
  queue_peak_ = std::max(queue_peak_, length);
  if (!queue_ran_empty) idle_wake_sent_ = false;
  if (queue_peak_ >= kMinPeak && length <= queue_peak_ / 2) {
    WakeFetchers();
    queue_peak_ = length;
    return;
  }
  // The queue ran empty while records wait on the brokers (as last
  // fetched): wake the fetchers once. One wake-up makes them look again,
  // and with an empty queue they keep fetching; so an idle source (or one
  // whose partitions end in a transaction marker, which the high watermark
  // counts) sends no more until records arrive again.
  if (!queue_ran_empty || idle_wake_sent_) return;
  for (const PartitionState& p : partitions_) {
    int64_t low = 0;
    int64_t high = -1;
    if (!p.done && !p.aligned_paused &&
        consumer_->get_watermark_offsets(p.topic, p.partition, &low, &high) == RdKafka::ERR_NO_ERROR &&
        high > p.next_offset) {
      idle_wake_sent_ = true;
      WakeFetchers();
      return;
    }
  }
}

void KafkaSource::StartBrokerRequests() {
  if (broker_requests_.joinable()) return;
  std::vector<std::pair<std::string, int32_t>> partitions;
  for (const PartitionState& p : partitions_) partitions.emplace_back(p.topic, p.partition);
  broker_requests_ = std::thread([this, partitions = std::move(partitions)]() mutable {
    RunBrokerRequests(std::move(partitions));
  });
}

void KafkaSource::WakeFetchers() {
  StartBrokerRequests();
  absl::MutexLock lock(&requests_mutex_);
  wake_requested_ = true;
}

void KafkaSource::QueryEndOffsets(int64_t candidate) {
  StartBrokerRequests();
  absl::MutexLock lock(&requests_mutex_);
  ends_requested_ = candidate;
}

void KafkaSource::PostToBoard(kafka_internal::SharedIdleness::Post post) {
  StartBrokerRequests();
  absl::MutexLock lock(&requests_mutex_);
  post_requested_ = std::move(post);
}

void KafkaSource::ReadBoard(int64_t sent_ms) {
  StartBrokerRequests();
  absl::MutexLock lock(&requests_mutex_);
  read_requested_ = sent_ms;
}

void KafkaSource::RunBrokerRequests(std::vector<std::pair<std::string, int32_t>> assigned) {
  pthread_setname_np(pthread_self(), "kafka-requests");
  // The board's partitions (fixed once Open made shared_).
  std::vector<kafka_internal::TopicPartitionKey> shared_own;
  std::vector<kafka_internal::TopicPartitionKey> shared_peers;
  if (shared_.has_value()) {
    shared_own = shared_->own();
    shared_peers = shared_->peers();
  }
  while (true) {
    bool wake = false;
    std::optional<int64_t> ends_for;
    std::optional<kafka_internal::SharedIdleness::Post> post;
    std::optional<int64_t> read_at;
    {
      absl::MutexLock lock(&requests_mutex_);
      requests_mutex_.Await(absl::Condition(
          +[](KafkaSource* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->requests_mutex_) {
            return s->wake_requested_ || s->ends_requested_.has_value() || s->post_requested_.has_value() ||
                   s->read_requested_.has_value() || s->requests_stopping_;
          },
          this));
      if (requests_stopping_) return;
      wake = wake_requested_;
      wake_requested_ = false;
      ends_for.swap(ends_requested_);
      post.swap(post_requested_);
      read_at.swap(read_requested_);
    }
    // The board first: what this subtask tells the others, then what they
    // told (a check reads the board before it asks for the end offsets).
    if (post.has_value()) {
      const absl::Status posted = board_->Post(shared_own, post->entries, kBrokerRequestTimeoutMs);
      PostAnswer answer{.version = post->version, .at_ms = SteadyMs()};
      if (!posted.ok()) answer.error = std::string(posted.message());
      absl::MutexLock lock(&requests_mutex_);
      post_answered_ = std::move(answer);
    }
    std::optional<BoardAnswer> board;
    if (read_at.has_value() || (ends_for.has_value() && board_ != nullptr)) {
      board = BoardAnswer{.sent_ms = SteadyMs()};
      absl::StatusOr<kafka_internal::BoardRead> read = board_->Read(shared_peers, kBrokerRequestTimeoutMs);
      if (read.ok()) {
        board->read = *std::move(read);
      } else {
        board->error = std::string(read.status().message());
      }
      if (!ends_for.has_value()) {
        absl::MutexLock lock(&requests_mutex_);
        reads_answered_.push_back(*std::move(board));
        continue;
      }
    }
    // ListOffsets for the end offsets (the high watermark, or under
    // read_committed the last stable offset: the consumer's isolation
    // level): the answer idleness needs, and the cheapest request that
    // reaches every partition's leader, which wakes the consumer's thread
    // for that broker to decide again whether to fetch — so one request
    // serves both.
    // With a board read, the others' partitions that it shows idle too
    // (after it): only their ends matter (PeersCaughtUp), and a peer
    // partition without a leader then holds event time only while it is
    // idle, not whenever it is asked.
    std::vector<RdKafka::TopicPartition*> partitions;
    for (const auto& [topic, partition] : assigned) {
      partitions.push_back(RdKafka::TopicPartition::create(topic, partition, -1));
    }
    std::vector<size_t> peers_asked;  // index into shared_peers, in `partitions` after the own ones
    if (board.has_value() && board->read.has_value()) {
      for (size_t i = 0; i < shared_peers.size() && i < board->read->entries.size(); ++i) {
        const std::optional<kafka_internal::BoardEntry>& entry = board->read->entries[i];
        if (!entry.has_value() || !entry->idle) continue;
        peers_asked.push_back(i);
        partitions.push_back(RdKafka::TopicPartition::create(shared_peers[i].first, shared_peers[i].second, -1));
      }
    }
    const int64_t asked_ms = SteadyMs();
    const RdKafka::ErrorCode code = consumer_->offsetsForTimes(partitions, kBrokerRequestTimeoutMs);
    if (ends_for.has_value()) {
      EndOffsetsAnswer answer{.covers = *ends_for, .asked_ms = asked_ms, .ok = code == RdKafka::ERR_NO_ERROR};
      if (!answer.ok) answer.error = RdKafka::err2str(code);
      std::vector<int64_t> peer_ends(shared_peers.size(), -1);  // -1: not asked (active) or not known
      for (size_t i = 0; i < partitions.size(); ++i) {
        const RdKafka::TopicPartition* tp = partitions[i];
        const bool known = code == RdKafka::ERR_NO_ERROR && tp->err() == RdKafka::ERR_NO_ERROR && tp->offset() >= 0;
        if (i >= assigned.size()) {
          if (known) peer_ends[peers_asked[i - assigned.size()]] = tp->offset();
          continue;
        }
        answer.ends.push_back(known ? tp->offset() : -1);
        if (!known && answer.ok) {
          answer.ok = false;
          answer.error = absl::StrCat(tp->topic(), "[", tp->partition(), "]: ", RdKafka::err2str(tp->err()));
        }
      }
      if (board.has_value()) {
        if (!board->error.empty()) {
          if (answer.ok) answer.error = board->error;
          answer.ok = false;
        } else if (answer.ok && !kafka_internal::PeersCaughtUp(shared_peers, *board->read, peer_ends,
                                                                 &answer.peers_behind)) {
          answer.ok = false;
        }
      }
      absl::MutexLock lock(&requests_mutex_);
      ends_answered_ = std::move(answer);
      if (board.has_value()) reads_answered_.push_back(*std::move(board));
    }
    RdKafka::TopicPartition::destroy(partitions);
    if (code != RdKafka::ERR_NO_ERROR && wake) {
      log_->debug("{}: waking the fetchers: {}", client_, RdKafka::err2str(code));
    }
  }
}

void KafkaSource::StopBrokerRequests() {
  if (!broker_requests_.joinable()) return;
  {
    absl::MutexLock lock(&requests_mutex_);
    requests_stopping_ = true;
  }
  broker_requests_.join();
}

void KafkaSource::Close() {
  if (consumer_ == nullptr) return;
  StopBrokerRequests();
  board_.reset();
  if (consumer_queue_ != nullptr) {
    rd_kafka_queue_destroy(consumer_queue_);
    consumer_queue_ = nullptr;
  }
  // No group membership to leave (explicit assignment) and nothing to
  // commit, so this does not wait on the brokers.
  consumer_->close();
  consumer_.reset();
  log_->info("{}: closed after {} records", client_, records_read_);
}

}  // namespace weir::connectors
