// KafkaSource: the built-in "kafka-source" connector. Each subtask reads a
// fixed share of the topics' partitions with an explicitly assigned librdkafka
// consumer (no consumer-group rebalancing), so that the same subtask always
// reads the same partitions and its offsets can be checkpointed.
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_SOURCE_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_SOURCE_H_

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/logging/logging.h"
#include "connectors/connector.h"
#include "connectors/kafka/kafka_client.h"
#include "connectors/kafka/kafka_properties.h"
#include "connectors/kafka/shared_idleness.h"
#include "spdlog/logger.h"
#include "weir/event_time.h"
#include "weir/operator.h"

namespace weir::kafka {
struct Record;
}  // namespace weir::kafka

namespace weir::connectors {

// A kafka-source vertex's properties, parsed and checked.
struct KafkaSourceConfig {
  enum class Start { kEarliest, kLatest, kCommitted, kTimestamp };

  std::string brokers;
  std::vector<std::string> topics;  // sorted, no duplicates
  Start start = Start::kEarliest;
  int64_t start_timestamp_ms = 0;  // for kTimestamp
  std::string group_id;            // "" : a generated one (nothing is committed)
  bool read_committed = true;
  bool bounded = false;
  // No replay (SourceContext::job_at_most_once, for a job whose sinks are
  // all at-most-once, or the property 'at-most-once'): the next offsets of
  // every batch are committed to the consumer group before the batch is
  // emitted, and a restart resumes from them when they lie beyond the
  // checkpoint's — a record is never emitted twice, and records in flight
  // at a failure are lost. Needs a stable group: group.id, or
  // "weir-<source name>-<topics>".
  bool at_most_once = false;
  Properties kafka_properties;  // the kafka.* extras, without the prefix
  // Event time with watermarks (the job's WatermarkStrategy, property
  // weir.event-time=source and the watermark.* properties). Unset: records
  // carry their Kafka timestamps, and no watermark is emitted.
  struct EventTime {
    int64_t out_of_orderness_ms = 0;
    int64_t idleness_ms = 0;  // 0: a partition is never idle
    int64_t max_future_ms = 24 * 3600 * 1000;  // 0: no check
    bool drop_invalid = false;  // watermark.invalid-timestamps=drop
    bool extractor = false;     // watermark.timestamps=extractor
    // A partition without records for this long that holds the watermark
    // back while another is ahead is named in a warning (once per stall);
    // 0: never. pipeline.watermark.stall-warning (SourceContext).
    int64_t stall_warning_ms = 60 * 1000;
    // Watermark alignment of the subtask's partitions: a partition whose
    // watermark is more than this ahead of the slowest partition that is
    // still being read is paused until that one catches up (0: off).
    // watermark.max-drift-ms.
    int64_t max_drift_ms = 0;
    // The consumer group through which the source's subtasks tell each
    // other their idle partitions (shared_idleness.h), set when the source
    // is created from the job id and the operator id. "": each subtask
    // judges idleness on its own partitions only.
    std::string shared_idleness_group;
  };
  std::optional<EventTime> event_time;
  // With event_time->extractor: the job's extractor
  // (SourceContext::timestamp_extractor), set when the source is created.
  std::function<int64_t(const void* record)> timestamp_extractor;
  // The librdkafka properties that size the consumer within the
  // TaskManager's budget (kafka_memory.h); none of them is in
  // kafka_properties. Set by the connector when it creates the source.
  Properties memory_properties;

  // Parses `properties` (see kafka_connectors.h); kInvalidArgument naming
  // the property that is missing or malformed. Defined in kafka_config.cc
  // with the rest of the property checks.
  static absl::StatusOr<KafkaSourceConfig> FromProperties(const Properties& properties,
                                                           const KafkaPropertyPolicy& policy = {});
};

// Reads the partitions assigned to this subtask: all partitions of all topics,
// sorted by (topic, partition), go to subtask i % parallelism in turn.
//
// Start offsets: earliest, latest, the offsets committed by group.id
// (earliest where none), or the first offset at or after a timestamp. Bounded
// mode reads up to the end offsets seen at the job's first Open (under
// read_committed, the last stable offsets) and then reports kEndOfInput; the
// ends are checkpointed with the offsets, so a restarted job stops there too
// rather than at what the topic holds by then. Unbounded mode never
// ends; a broker outage there is logged and waited out, while bounded mode
// fails after 60 s without progress and with broker errors.
//
// Checkpoints: the next offset of every assigned partition is kept in the
// union list state "kafka-offsets" ("topic:partition:offset" entries;
// "topic:partition:offset:end" in bounded mode). On restore every subtask
// gets every entry and starts each of its partitions at the restored offset,
// so the assignment may differ from the checkpointed one (another
// parallelism, more partitions); a partition without a restored offset
// starts as `start` says. Bounded, a partition without a restored end (a new
// partition, or state of an unbounded source) reads up to the brokers' end at
// Open, which is logged.
//
// Event time (config.event_time): each record's event time is its Kafka
// timestamp (CreateTime or LogAppendTime, as the topic says) or the
// extractor's. Each partition has a watermark (its largest timestamp minus
// the out-of-orderness, minus 1 ms); every periodic tick the subtask emits
// the minimum over its partitions that are neither idle nor finished
// (bounded), or IDLE when every open partition is idle — a subtask without
// partitions is idle from its first tick. A partition is idle after
// idleness_ms (when > 0) without a record, and only while it has nothing to
// read at the broker: its position reached the end its last fetch saw (the
// end-of-partition event: the high watermark, or under read_committed the
// last stable offset, past any transaction marker) and, under
// read_uncommitted, the high watermark librdkafka last fetched. Before the
// watermark moves past an idle partition, a ListOffsets request (at most
// one per kIdleCheckIntervalMs, sent by the broker-requests thread) asks
// the brokers for the end offsets; the watermark moves only as far as
// that answer covers, and a partition the answer shows records for is
// active again, holding the watermark until it has read them. When other
// subtasks read partitions of the source too, the subtasks tell each other
// their idle partitions through a consumer group (shared_idleness.h): a
// partition goes idle only once the others can know, and the watermark
// moves only as far as the others' idle partitions have nothing unread.
// Records with a missing, negative or far-future timestamp fail the
// job (weir::UnrecoverableError naming the record's position) or, with
// drop_invalid, are skipped and counted. Partitions turning idle and active
// are logged, and so is a partition that holds the watermark back without
// records for stall_warning_ms.
//
// Failures throw std::runtime_error with a message for the user (topic
// missing, brokers unreachable, a fatal consumer error).
//
// Thread-safety: one task thread calls every method (weir/operator.h). A
// thread of its own ("broker requests") sends the requests the task thread
// must not wait for: with small prefetch queues those that wake
// librdkafka's fetchers (MaybeWakeFetchers), and with idleness the end
// offsets' queries (CheckIdlePartitions), and the idleness board's
// commits and reads.
class KafkaSource : public weir::SourceOperator {
 public:
  explicit KafkaSource(KafkaSourceConfig config);
  ~KafkaSource() override;

  KafkaSource(const KafkaSource&) = delete;
  KafkaSource& operator=(const KafkaSource&) = delete;

  void InitializeState(OperatorContext& context) override;
  void Open(OperatorContext& context, RecordOutput* output) override;
  SourceStatus PollNext() override;
  void OnPeriodicEmit() override;
  void SnapshotState(const CheckpointInfo& checkpoint) override;
  void Close() override;

  // The next offset to read of each assigned partition.
  std::map<std::pair<std::string, int32_t>, int64_t> CurrentOffsets() const;

  // Records emitted since Open.
  int64_t records_read() const { return records_read_; }

 private:
  struct PartitionState {
    std::string topic;
    int32_t partition = 0;
    int64_t next_offset = 0;
    int64_t end_offset = -1;  // bounded mode only
    bool done = false;        // bounded mode: reached end_offset
    bool restored = false;    // next_offset came from a checkpoint
    // Event time: the partition's split in watermarks_, whether it was idle
    // at the last tick, and whether its stall was reported.
    int split = -1;
    bool idle = false;
    bool stall_reported = false;
    Gauge* watermark_gauge = nullptr;
    // Paused by AlignPartitions (never a finished partition).
    bool aligned_paused = false;
    // Alignment: the partition has nothing to read (its last fetch reached
    // the end: the high watermark, or under read_committed the last stable
    // offset, so an open transaction's records count as not there yet)
    // since its last record; and starved_ms_ at its last record, its end,
    // its resume, or the source's first fetch answer.
    bool at_end = false;
    int64_t starved_mark_ms = 0;
    // Idleness: the partition's end offset as the brokers last answered
    // (-1: not asked yet), and the records at the broker it has not read
    // as far as known (0 at the last tick when none).
    int64_t broker_end = -1;
    int64_t backlog = 0;
    // When the answer that last told broker_end was asked (steady ms).
    int64_t end_asked_ms = -1;
  };
  // The answer to an end offsets' query: per partition (partitions_'
  // order) its end, or -1 where the brokers did not say.
  struct EndOffsetsAnswer {
    std::vector<int64_t> ends;
    int64_t covers = 0;  // the candidate watermark it was asked for
    int64_t asked_ms = 0;  // when ListOffsets went out (steady ms)
    bool ok = false;     // every partition's end came (and no idle peer has records)
    std::string error;   // a failure, when not ok
    // Shared idleness: why not ok when an idle partition of another subtask
    // has records (the board read before the ends is passed on separately).
    std::string peers_behind;
  };
  // A post to the board done (at_ms, steady), or failed (error).
  struct PostAnswer {
    int64_t version = 0;
    int64_t at_ms = 0;
    std::string error;
  };
  // A board read (sent at sent_ms, steady), or why it failed.
  struct BoardAnswer {
    int64_t sent_ms = 0;
    std::optional<kafka_internal::BoardRead> read;
    std::string error;
  };

  // Watermark alignment (EventTime::max_drift_ms): pauses the partitions
  // more than the drift ahead of the slowest one being read, and resumes
  // them once within half the drift (so that they do not flap: each pause
  // discards what librdkafka had fetched for the partition).
  void AlignPartitions(int64_t now_ms);
  // Pauses (or resumes) `partitions` in the consumer; a partition it fails
  // for is logged and keeps its previous aligned_paused, to be tried again
  // at the next tick (librdkafka 2.0 fails only a partition not assigned,
  // so this is a guard rather than an expected path).
  void PauseOrResume(const std::vector<PartitionState*>& partitions, bool pause, int64_t now_ms);
  // The librdkafka configuration of the consumer (and of the board's
  // handle, which sets its own group).
  std::unique_ptr<RdKafka::Conf> ConsumerConf() const;
  void CreateConsumer();
  // Fills next_offset (and end_offset when bounded) of every partition,
  // from the restored state where it has them, else asking the brokers for
  // up to the open timeout.
  void ResolveOffsets();
  void AssignAndLog(size_t total_partitions);
  // The state of the partition `message` came from, or nullptr.
  PartitionState* Find(RdKafka::Message& message);
  // Emits `message`; false if it is not emitted (beyond the bounded end).
  bool EmitRecord(RdKafka::Message& message);
  // At-most-once: commits the batch's next offsets, then emits it.
  void EmitAfterCommit(std::vector<std::unique_ptr<RdKafka::Message>>& batch);
  void HandleEndOfPartition(RdKafka::Message& message);
  // Throws for errors the consumer cannot recover from; logs the others.
  void HandleConsumeError(RdKafka::Message& message);
  void MarkDone(PartitionState& partition);
  // Event time: the record's timestamp, checked; false if the record is to
  // be dropped (drop_invalid). Throws weir::UnrecoverableError otherwise.
  bool EventTimeOf(const PartitionState& partition, const kafka::Record& record, int64_t* timestamp);
  // Event time: logs partitions turning idle or active and stalls, and sets
  // the partitions' watermark gauges, as of `combined`.
  void ReportPartitions(int64_t now_ms, int64_t combined_watermark);
  // Idleness (before Combine): tells watermarks_ which partitions are
  // caught up with the brokers, from the end-of-partition events, the
  // cached high watermarks and the brokers' last answer; asks the brokers
  // again when the watermark would move past an idle partition further
  // than their last answer covers. Returns how far the watermark may move
  // past idle partitions now.
  // With shared idleness (shared_): gates this subtask's idle partitions
  // until the others know, and sets *limit_always when every move needs an
  // answer (another subtask's partition is idle).
  int64_t CheckIdlePartitions(int64_t now_ms, bool* limit_always);
  void ThrowIfFatal() const;
  void ThrowIfStalled();
  std::string Describe(const PartitionState& partition) const;
  // Sets each partition's lag gauge from the high watermark the consumer
  // last saw (cached by librdkafka; no request to the brokers).
  void UpdateLag();
  // Small prefetch queues (kafka_memory.h): librdkafka 2.0's fetcher stops
  // once the consumer queue holds queued.min.messages records or
  // queued.max.messages.kbytes, and looks again only when its broker thread
  // next wakes up — up to a second later, an idle second for the source.
  // This wakes the brokers' threads with a request (ListOffsets for the end
  // offsets) once the queue has drained to half its last peak, or once when
  // the queue ran empty while records wait on the brokers, so that the
  // fetcher refills it before it runs dry. broker_requests_ sends the
  // request, so the task thread never waits for it.
  void MaybeWakeFetchers(bool queue_ran_empty);
  // Asks broker_requests_ to send a wake-up request (at most one pending).
  void WakeFetchers();
  // Asks broker_requests_ for the end offsets of every partition, for a
  // watermark up to `candidate` (at most one pending).
  void QueryEndOffsets(int64_t candidate);
  // Asks broker_requests_ to commit `post` to the board, and to read it
  // (the read sent at sent_ms); at most one of each pending.
  void PostToBoard(kafka_internal::SharedIdleness::Post post);
  void ReadBoard(int64_t sent_ms);
  void StartBrokerRequests();
  // broker_requests_'s loop; `partitions` are this subtask's.
  void RunBrokerRequests(std::vector<std::pair<std::string, int32_t>> partitions);
  void StopBrokerRequests();

  const KafkaSourceConfig config_;
  // Checkpointed offsets: the state, and what was restored from it.
  OperatorListState* offsets_state_ = nullptr;
  std::map<std::pair<std::string, int32_t>, int64_t> restored_offsets_;
  std::map<std::pair<std::string, int32_t>, int64_t> restored_end_offsets_;  // bounded state only
  const std::shared_ptr<spdlog::logger> log_;
  std::string client_;  // "KafkaSource 'name' subtask i/p", for messages
  std::string group_id_;
  RecordOutput* output_ = nullptr;
  std::unique_ptr<kafka_internal::ClientEvents> events_;
  std::unique_ptr<RdKafka::KafkaConsumer> consumer_;
  // MaybeWakeFetchers: on when the prefetch thresholds are not librdkafka's
  // defaults; the consumer's queue, its largest length since the last wake
  // and when that was.
  bool wake_fetchers_ = false;
  rd_kafka_queue_t* consumer_queue_ = nullptr;
  size_t queue_peak_ = 0;
  bool idle_wake_sent_ = false;  // since the last record
  // Sends the wake-up requests and the end offsets' queries; consumer_
  // outlives it (StopBrokerRequests joins it before the consumer closes).
  std::thread broker_requests_;
  absl::Mutex requests_mutex_;
  bool wake_requested_ ABSL_GUARDED_BY(requests_mutex_) = false;
  bool requests_stopping_ ABSL_GUARDED_BY(requests_mutex_) = false;
  // An end offsets' query asked for (its candidate), and the last answer.
  std::optional<int64_t> ends_requested_ ABSL_GUARDED_BY(requests_mutex_);
  std::optional<EndOffsetsAnswer> ends_answered_ ABSL_GUARDED_BY(requests_mutex_);
  // Shared idleness: requests to and answers from broker_requests_.
  std::optional<kafka_internal::SharedIdleness::Post> post_requested_ ABSL_GUARDED_BY(requests_mutex_);
  std::optional<int64_t> read_requested_ ABSL_GUARDED_BY(requests_mutex_);
  std::optional<PostAnswer> post_answered_ ABSL_GUARDED_BY(requests_mutex_);
  // Board reads answered (a check's and the periodic one), oldest first.
  std::vector<BoardAnswer> reads_answered_ ABSL_GUARDED_BY(requests_mutex_);
  // The source's subtasks' idleness (shared_idleness.h): set in Open when
  // the source has idleness and partitions other subtasks read; its board
  // is used by broker_requests_ only (shared_ by the task thread only; its
  // partition lists are fixed before broker_requests_ starts).
  std::optional<kafka_internal::SharedIdleness> shared_;
  std::unique_ptr<kafka_internal::IdlenessBoard> board_;
  logging::RateLimiter board_log_limiter_{std::chrono::seconds(10)};
  // Idleness, task thread: a query is out (asked, not answered), when the
  // last was asked, and the candidate watermark the last answer covers.
  bool ends_pending_ = false;
  int64_t ends_asked_ms_ = 0;  // steady ms: a wall-clock step must not delay checks
  int64_t ends_cover_ = weir::kMinWatermark;
  logging::RateLimiter ends_log_limiter_{std::chrono::seconds(10)};
  std::vector<PartitionState> partitions_;  // this subtask's, sorted
  size_t last_found_ = 0;                   // Find's guess for the next message
  size_t partitions_left_ = 0;              // bounded mode: not yet done
  int64_t records_read_ = 0;
  // Partitions paused by AlignPartitions so far.
  int64_t aligned_pauses_ = 0;
  // Time PollNext spent waiting on an empty consumer queue, in all: the
  // clock by which alignment judges a partition quiet. Unlike the wall
  // clock it stands still while the source is backpressured (its emits
  // block), when every partition would otherwise look quiet.
  int64_t starved_ms_ = 0;
  bool heard_ = false;  // a fetch has answered (a record, an end or an error)
  logging::RateLimiter align_log_limiter_{std::chrono::seconds(10)};
  bool finished_logged_ = false;
  std::chrono::steady_clock::time_point last_progress_;
  // weir_kafka_consumer_lag_records per partition (partitions_' order; null
  // until its high watermark is known), and when it was last updated.
  MetricGroup* metrics_ = nullptr;
  std::vector<Gauge*> lag_;
  std::chrono::steady_clock::time_point last_lag_update_;
  logging::RateLimiter error_log_limiter_{std::chrono::seconds(10)};
  // Event time (config_.event_time): one split per partition.
  std::optional<weir::internal::SplitWatermarks> watermarks_;
  weir::internal::WatermarkEmitter emitter_;
  int64_t now_ms_ = 0;  // the wall clock at the start of PollNext
  Counter* dropped_ = nullptr;
  logging::RateLimiter drop_log_limiter_{std::chrono::seconds(10)};
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_SOURCE_H_
