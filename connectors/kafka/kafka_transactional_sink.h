// KafkaTransactionalSink: the "kafka-sink" connector with guarantee
// exactly-once. Records go into Kafka transactions that are committed only
// once the checkpoint covering them has completed (two-phase commit tied to
// checkpoints; docs/exactly-once.md tells the whole story).
//
// Transactional ids: a pool per subtask, "<prefix>-<subtask>-<k>" for k in
// [0, pool size), kTransactionPoolSize to start with. Two rules make a
// restore from ANY completed checkpoint or savepoint safe, in any order and
// any number of times (docs/exactly-once.md, "Restoring older points"):
//
//   1. One transaction with records per producer session. An id is used
//      again only after its transaction's commit was confirmed and a
//      completed checkpoint no longer lists it, and then always through a
//      new producer, whose init_transactions makes the broker bump the
//      epoch (or give a new producer id). So (id, producer id, epoch) names
//      one transaction: a recovery commit by the (producer id, epoch) a
//      checkpoint recorded commits that transaction or nothing — never a
//      later one (the reused-id hazard, FLINK-8132).
//   2. Outcome markers. Every transaction with records also commits, from
//      its first record, the offset of consumer group "<its id>" on
//      partition 0 of the output topic (send_offsets_to_transaction), which
//      encodes its producer id and epoch (MarkerOffset). Every
//      initialization that may abort a transaction some checkpoint lists
//      (at start, on growth, for lingering ids) commits an "init" marker of
//      its own session — at start only where the id's state before says
//      one may be owed (SettledBeforeStart). The broker makes a marker
//      visible exactly when its transaction commits. So when a recovery
//      commit finds its transaction
//      no longer open, the id's newest marker says why
//      (ClassifyRestoredCommit): the transaction's own marker, it was
//      committed; a newer one whose metadata says every session since
//      this transaction followed a confirmed commit, committed too; another
//      newer one, a later run committed it or aborted it after restoring an
//      older point, and it is skipped with a warning; an older
//      one or none, nothing of Weir touched the id since, so the broker
//      aborted it (transaction.timeout.ms): data loss, the job fails.
//
// Every barrier pre-commits the open transaction when it holds records: a
// checkpoint must never count source positions beyond records that no
// committable covers. When no id is free (checkpoints are not completing),
// the pool grows by one id, and its size goes into the checkpoint. An
// attempt grows its pool at most kTransactionPoolGrowth ids beyond the size
// the newest checkpoint it knows complete recorded (or it started with);
// past that the task fails (checkpoints are not completing) and restarts
// from the last completed checkpoint, which commits what is pending. On
// start, the kTransactionPoolGrowth ids past the restored pool are
// initialized too where something may be open, which aborts whatever a
// grown pool left open there.
//
// Per checkpoint n, on the task thread:
//   PrepareSnapshotPreBarrier(n)  flush the open transaction (every record
//       acknowledged), record it as pending for n, and continue writing on a
//       free id. An interval without records pre-commits nothing.
//   SnapshotState(n)     the pending transactions whose commit is not yet
//       confirmed go into union list operator state as committables
//       (id, producer id, epoch, checkpoint).
//   NotifyCheckpointComplete(n)  every pending transaction <= n is committed
//       on the committer thread, while the task goes on writing into the
//       next one; ids whose release checkpoint is <= n get a new producer
//       on the preparer thread (rule 1) and then become free.
//   NotifyCheckpointAborted(n)   nothing: its pending transactions are
//       committed with the next completed checkpoint.
// On start (InitializeState/Open): the restored committables of this
// subtask (and those of subtasks that no longer exist, by subtask
// (old index mod parallelism)) are committed with TransactionClient (EndTxn)
// and classified as above; then every id of the pool is initialized, which
// aborts whatever a previous attempt or a later run left open on it, and so
// are the kTransactionPoolGrowth ids past it and the ids of removed
// subtasks unless nothing is open on them (SettledBeforeStart). An id whose
// restored transaction was committed just now (EndTxn answered NONE: the id
// has had no session since) is initialized without a marker; every other
// pool id after DescribeTransactions, with an init marker where
// InitNeedsMarker says; an id past the pool always with one.
//
// Bounded input: the sources end with a final checkpoint (they wait for a
// checkpoint after their end to complete before they end their input), so
// the last transaction is pre-committed at its barrier and committed like
// any other. EndInput then commits whatever is still pending — nothing
// normally; it is a fallback for a chain that ends without that checkpoint.
//
// Producers report statistics (they carry the producer id and epoch) every
// 250 ms into their queues; the task thread polls every producer it holds
// at each barrier, notification and every 1024 records, so that those
// queues stay short.
//
// Thread-safety: the task thread calls every operator method. Two threads
// owned by the sink do the slow work off it: the committer runs
// commit_transaction(), the preparer creates and initializes the new
// producers of released ids. A producer is touched by one thread at a time
// (the task thread hands a slot over and takes it back through `mutex_`).
#ifndef WEIR_CONNECTORS_KAFKA_KAFKA_TRANSACTIONAL_SINK_H_
#define WEIR_CONNECTORS_KAFKA_KAFKA_TRANSACTIONAL_SINK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "connectors/kafka/kafka_sink.h"
#include "connectors/kafka/protocol/transaction_client.h"
#include "spdlog/logger.h"
#include "weir/operator.h"

namespace weir::connectors {

// Transactional ids per subtask to start with, and how far an attempt may
// grow the pool beyond a completed checkpoint's (see above).
inline constexpr int kTransactionPoolSize = 5;
inline constexpr int kTransactionPoolGrowth = 4;

// Transactions must outlive a checkpoint interval, a checkpoint's timeout
// and a restart; the broker's transaction.max.timeout.ms is 15 min by
// default, so that is the default here too (librdkafka's own is 60 s).
inline constexpr int64_t kDefaultTransactionTimeoutMs = 900000;

// A pre-committed transaction, as the checkpoint keeps it.
struct Committable {
  std::string transactional_id;
  int64_t producer_id = -1;
  int16_t producer_epoch = -1;
  int64_t checkpoint_id = 0;  // the barrier it was pre-committed at
  int subtask = 0;            // the subtask whose pool the id belongs to

  // "v1 <subtask> <checkpoint> <producer id> <epoch> <transactional id>".
  std::string Encode() const;
  // kDataLoss naming what is wrong for anything Encode did not write.
  static absl::StatusOr<Committable> Decode(std::string_view text);
};

// "<prefix>-<subtask>-<k>".
std::string TransactionalId(const std::string& prefix, int subtask, int k);

// Outcome markers (rule 2 above). A marker is the offset that consumer
// group "<transactional id>" commits on partition 0 of the output topic
// inside a transaction: producer id << 17 | epoch << 1 | kind. Larger means
// later: the broker hands out producer ids in increasing order and bumps the
// epoch of an id at every initialization, and within one session the init
// marker (kind 0) precedes the data transaction (kind 1).
enum class MarkerKind : int { kInit = 0, kData = 1 };
// kOutOfRange for a producer id >= 2^46 or a negative id or epoch.
absl::StatusOr<int64_t> MarkerOffset(int64_t producer_id, int16_t producer_epoch, MarkerKind kind);
// "producer id P, epoch e, data|initialization" for messages.
std::string DescribeMarker(int64_t offset);

// What a recovery commit of a restored transaction found (see the header
// comment), from the commit's status and the newest marker on the id.
enum class RestoredCommit {
  kCommitted,         // committed now, or already by an earlier commit of it
  kAlreadyCommitted,  // not open, and its own marker is the newest: committed
  kResolvedLater,     // not open, and a later session committed a marker:
                      // committed before it, or aborted by a later run
  kUnknown,           // the broker no longer knows the id, and no marker says
  kLost,              // not open, and nothing of Weir touched the id since:
                      // the broker aborted it (or TRANSACTION_ABORTABLE)
  kFailed,            // no answer (unavailable, unauthorized, ...): retry later
};
// `chain_from` is what the newest marker's metadata says (MarkerChainFrom):
// every session of the id since that marker followed a confirmed commit, so
// a transaction at or after it that a newer marker follows was committed.
RestoredCommit ClassifyRestoredCommit(const absl::Status& end_txn, std::optional<int64_t> newest_marker,
                                      std::optional<int64_t> chain_from, const Committable& committable);
// A marker's metadata: "weir v1 chain=<marker offset>" (just "weir v1" when
// the chain is unknown), and what it says; nullopt for anything else.
std::string MarkerMetadata(int64_t chain_from);
std::optional<int64_t> MarkerChainFrom(absl::string_view metadata);

// What a start knows of a transactional id before it initializes it: the
// transaction coordinator's view (nullopt: unknown — the brokers cannot
// describe transactions, or a request failed) and, for an id in state
// "Empty", its newest outcome marker.
struct IdBeforeStart {
  std::optional<kafka_protocol::TransactionDescription> description;
  std::optional<int64_t> newest_marker;
};
// Whether nothing on the id is open and no transaction some checkpoint may
// list on it lacks a newer marker — so an initialization that aborts nothing
// owes no init marker (docs/design/kafka-restores.md, 2.6). True when the
// broker does not know the id; when its last transaction was committed
// ("CompleteCommit": that transaction's marker is the id's newest, and none
// began since); when it is "Empty" at epoch 0 (its producer id was only
// ever initialized); and when it is "Empty" at (P, e) with the id's newest
// marker from session (P, e - 1) (one initialization since that marker's
// commit, which had nothing open to fence). False for anything else — "Ongoing",
// "Prepare*", "CompleteAbort", any other "Empty", unknown: these may follow an
// initialization that aborted a listed transaction and died before its init
// marker, which a marker now makes up for.
bool SettledBeforeStart(const IdBeforeStart& before);
// Whether the initialization at start that got (producer_id,
// producer_epoch) must commit an init marker: unless the id was settled
// before and the initialization moved it exactly one session on (epoch 0 of
// an id it created; (P, e + 1) of one at (P, e)), so nothing began on the id
// in between that it could have aborted.
bool InitNeedsMarker(const IdBeforeStart& before, int64_t producer_id, int16_t producer_epoch);

class KafkaTransactionalSink : public weir::StreamOperator {
 public:
  explicit KafkaTransactionalSink(KafkaSinkConfig config);
  ~KafkaTransactionalSink() override;

  KafkaTransactionalSink(const KafkaTransactionalSink&) = delete;
  KafkaTransactionalSink& operator=(const KafkaTransactionalSink&) = delete;

  void InitializeState(OperatorContext& context) override;
  void Open(OperatorContext& context, RecordOutput* output) override;
  // `record` is a weir::kafka::Record*.
  void Process(void* record) override;
  void EndInput() override;
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override;
  void SnapshotState(const CheckpointInfo& checkpoint) override;
  // Commits the transactions of checkpoints <= `checkpoint_id` on the
  // committer thread; after a final-checkpoint EndInput it also waits for
  // them (the task ends when this returns) and throws if one failed.
  void NotifyCheckpointComplete(int64_t checkpoint_id) override;
  void Close() override;

  // Records acknowledged by the brokers (committed or not) since Open, and
  // transactions committed. Task thread.
  int64_t delivered() const;
  int64_t committed_transactions() const { return committed_transactions_; }

 private:
  struct Slot;
  class Events;
  class DeliveryReports;

  // How an id is initialized: kRelease after its last transaction's commit
  // was confirmed (nothing to abort, no marker); kBreak where it may abort a
  // transaction some checkpoint lists (writes an init marker); kStart for a
  // pool id at start, with what DescribeBeforeStart found (an init marker
  // where InitNeedsMarker says).
  enum class InitKind { kRelease, kBreak, kStart };
  // Gives `slot` a new producer (destroying its old one, which holds no
  // transaction) and initializes its transactions (which aborts a
  // transaction left open on the id), learns its producer id and epoch, and
  // commits an init marker as `kind` says (`before` is required for kStart).
  // Any thread; touches only `slot`.
  absl::Status Prepare(Slot& slot, InitKind kind, const IdBeforeStart* before = nullptr) const;
  // DescribeTransaction of `id` and, for "Empty", its newest marker; an
  // unknown view when a request fails. Any thread.
  IdBeforeStart DescribeBeforeStart(const kafka_protocol::TransactionClient& client, const std::string& id) const;
  // Sends the marker of `slot`'s session into its open transaction.
  absl::Status SendMarker(Slot& slot, MarkerKind kind) const;
  // begin_transaction and the data marker on the current slot.
  void BeginTransaction(Slot& slot);
  // commit_transaction on `slot`'s producer, retrying what may pass.
  absl::Status Commit(Slot& slot) const;
  // Commits the restored committables this subtask is responsible for and
  // classifies what it finds; throws on kLost and kFailed. Returns the ids
  // whose transaction EndTxn committed (or found committed) at the
  // recorded producer id and epoch — no session of theirs followed — with
  // that transaction's data marker. `client` is the start's (RecoveryClient).
  absl::flat_hash_map<std::string, int64_t> CommitRestored(const kafka_protocol::TransactionClient& client);
  void Produce(Slot& slot, const kafka::Record& r);
  // Waits until every record of `slot` is acknowledged; throws on failure.
  void Flush(Slot& slot);
  // Pre-commits the open transaction for `checkpoint_id` when it has
  // records, on to a free slot (growing the pool when there is none).
  void PreCommit(int64_t checkpoint_id);
  // A new slot at the end of the pool, prepared; throws at the cap.
  Slot* Grow(int64_t checkpoint_id);
  // Initializes (kBreak) the kTransactionPoolGrowth ids past the pool,
  // aborting what an attempt that grew the pool after the restored
  // checkpoint left open, and, after scaling down, every id of the removed
  // subtasks this subtask took the restored transactions of — each unless
  // SettledBeforeStart (nothing to abort, no marker owed: left alone) — and
  // the ids FindLingering finds.
  void AbortLingering(const kafka_protocol::TransactionClient& client);
  // The ids past the ones a start initializes anyway (the pool, the growth
  // margin, the restored removed subtasks') on which a later run — one
  // that grew its pool further, or ran at a higher parallelism — left a
  // transaction open: found read-only with DescribeTransactions, walking
  // this subtask's ids and those of higher subtasks it answers for until
  // the broker knows none. Empty for brokers before Kafka 3.0.
  std::vector<std::string> FindLingering(const kafka_protocol::TransactionClient& client) const;
  // The client a start sends its EndTxn, OffsetFetch and
  // DescribeTransactions requests with; Open makes one and passes it on.
  kafka_protocol::TransactionClient RecoveryClient() const;
  // Throws, naming the brokers, when none answers within the open timeout
  // (socket.timeout.ms, as the other Kafka clients wait); a broker that
  // answers with an error passes (the calls after this one handle it).
  void CheckBrokersReachable() const;
  // "<client>: cannot reach Kafka brokers at <brokers> within <timeout><doing>
  // (<detail>); check ...": the one wording for brokers that do not answer.
  std::string Unreachable(int timeout_ms, absl::string_view doing, absl::string_view detail) const;
  // Serves the queues of the producers the task thread holds.
  void PollOwned();
  Slot* NewSlot(int k);
  // Takes the committer thread's results; throws its first failure.
  void DrainResults();
  // A thread that runs posted work in order.
  class Worker;
  // Runs `work` on `slot` on `worker`; its status comes back through
  // results_.
  void PostForSlot(Worker& worker, Slot* slot, std::function<absl::Status()> work);
  // Stops both threads: after their queued work when `drain`, else after
  // the work in progress only.
  void StopWorkers(bool drain);
  Slot* FreeSlot();
  [[noreturn]] void ThrowDataLoss(const Committable& c, const absl::Status& status,
                                  std::optional<int64_t> newest_marker) const;

  const KafkaSinkConfig config_;
  const std::shared_ptr<spdlog::logger> log_;
  std::string client_;  // "KafkaSink 'name' subtask i/p", for messages
  OperatorContext* context_ = nullptr;  // from Open
  std::string prefix_;
  int subtask_ = 0;
  int parallelism_ = 1;
  OperatorListState* committables_state_ = nullptr;
  OperatorListState* pool_state_ = nullptr;  // "v1 <subtask> <pool size>"
  std::vector<Committable> restored_;
  std::map<int, int> restored_pool_sizes_;  // subtask -> pool size
  std::vector<std::unique_ptr<Slot>> slots_;
  Slot* current_ = nullptr;  // the slot taking records; null only before Open
  int64_t committed_transactions_ = 0;
  // weir_kafka_transactions_*_total; set in Open.
  Counter* committed_metric_ = nullptr;
  Counter* recovery_commits_metric_ = nullptr;
  Counter* aborted_metric_ = nullptr;
  // weir_kafka_transactions_recovery_resolved_total by outcome.
  Counter* resolved_committed_metric_ = nullptr;
  Counter* resolved_later_metric_ = nullptr;
  Counter* resolved_unknown_metric_ = nullptr;
  int64_t records_since_poll_ = 0;
  // EndInput ran and left the open transaction to the final checkpoint.
  bool ended_for_final_checkpoint_ = false;
  size_t growth_limit_ = 0;                  // the pool may not grow past this
  std::map<int64_t, size_t> snapshot_sizes_;  // checkpoint -> pool size it recorded

  // Results of the committer and preparer threads (started in Open).
  absl::Mutex mutex_;
  // (slot index, result) of finished commits and preparations.
  std::vector<std::pair<int, absl::Status>> results_ ABSL_GUARDED_BY(mutex_);
  std::atomic<bool> results_ready_{false};
  std::unique_ptr<Worker> committer_;
  std::unique_ptr<Worker> preparer_;
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_TRANSACTIONAL_SINK_H_
