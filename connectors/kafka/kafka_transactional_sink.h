// KafkaTransactionalSink: the "kafka-sink" connector with guarantee
// exactly-once. Records go into Kafka transactions that are committed only
// once the checkpoint covering them has completed (two-phase commit tied to
// checkpoints; docs/exactly-once.md tells the whole story).
//
// Transactional ids: a pool per subtask, "<prefix>-<subtask>-<k>" for k in
// [0, pool size), kTransactionPoolSize to start with. Each id has one
// librdkafka producer for the life of the task; successive transactions of
// one id share its producer id and epoch. That is safe only because of one
// rule, which rules out committing a later transaction by an earlier one's
// (producer id, epoch) after a crash (the reused-id hazard, FLINK-8132):
//
//   An id whose transaction T was pre-committed for checkpoint n is used
//   again only after a checkpoint m > n has completed whose snapshot no
//   longer lists T (taken after T's commit was confirmed).
//
// Recovery restores the newest completed checkpoint, so a restored
// checkpoint that lists T was taken before that release: the id has carried
// no other transaction since, and committing T again by its (producer id,
// epoch) commits exactly T, or nothing if it already was. It also makes an
// epoch error at that commit mean one thing only: the broker aborted T
// (transaction.timeout.ms passed) and its records are lost. (The one
// exception is the JobMaster falling back to an older retained checkpoint
// because the newest is damaged: that replays output newer checkpoints
// already committed, and the sink is at-least-once for that restore.)
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
// initialized too, which aborts whatever a grown pool left open there.
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
//       next one; ids whose release checkpoint is <= n become free.
//   NotifyCheckpointAborted(n)   nothing: its pending transactions are
//       committed with the next completed checkpoint.
// On start (InitializeState/Open): the restored committables of this
// subtask (and those of subtasks that no longer exist, by subtask 0) are
// committed with TransactionClient (EndTxn), then every other id of the pool
// is initialized, which aborts whatever transaction a previous attempt left
// open on it. A commit that fails with "aborted" / an epoch error is data
// loss: the task throws weir::UnrecoverableError with the id, the
// checkpoint and the likely cause, and the job fails without a restart.
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
// Thread-safety: the task thread calls every operator method. A committer
// thread owned by the sink runs commit_transaction() and the initialization
// of released producers; a producer is touched by one thread at a time (the
// task thread hands it over and takes it back through `mutex_`).
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
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "connectors/kafka/kafka_sink.h"
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

  // Creates slot `k`'s producer and initializes its transactions (which
  // aborts a transaction a previous attempt left open on the id), then
  // learns its producer id and epoch. Any thread; touches only `slot`.
  // `learn_id` false: initialize only (to abort), without waiting for the
  // producer id.
  absl::Status Prepare(Slot& slot, bool learn_id = true) const;
  // commit_transaction on `slot`'s producer, retrying what may pass.
  absl::Status Commit(Slot& slot) const;
  // Commits the restored committables this subtask is responsible for.
  void CommitRestored();
  void Produce(Slot& slot, const kafka::Record& r);
  // Waits until every record of `slot` is acknowledged; throws on failure.
  void Flush(Slot& slot);
  // Pre-commits the open transaction for `checkpoint_id` when it has
  // records, on to a free slot (growing the pool when there is none).
  void PreCommit(int64_t checkpoint_id);
  // A new slot at the end of the pool, prepared; throws at the cap.
  Slot* Grow(int64_t checkpoint_id);
  // Initializes the kTransactionPoolGrowth ids past the pool, aborting what
  // an attempt that grew the pool after the restored checkpoint left open,
  // and, after scaling down, every id of the removed subtasks this subtask
  // took the restored transactions of.
  void AbortLingering();
  // Serves the queues of the producers the task thread holds.
  void PollOwned();
  Slot* NewSlot(int k);
  // Takes the committer thread's results; throws its first failure.
  void DrainResults();
  // Runs `work` on the committer thread.
  void Post(std::function<void()> work);
  // Runs `work` on `slot` there; its status comes back through results_.
  void PostForSlot(Slot* slot, std::function<absl::Status()> work);
  void RunCommitter();
  // Stops the committer thread: after the queued work when `drain`, else
  // after the work in progress only.
  void StopCommitter(bool drain);
  Slot* FreeSlot();
  [[noreturn]] void ThrowDataLoss(const Committable& c, const absl::Status& status) const;

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
  int64_t records_since_poll_ = 0;
  // EndInput ran and left the open transaction to the final checkpoint.
  bool ended_for_final_checkpoint_ = false;
  size_t growth_limit_ = 0;                  // the pool may not grow past this
  std::map<int64_t, size_t> snapshot_sizes_;  // checkpoint -> pool size it recorded

  // Committer thread.
  absl::Mutex mutex_;
  absl::CondVar work_ready_;
  std::deque<std::function<void()>> work_ ABSL_GUARDED_BY(mutex_);
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  // (slot index, result) of finished commits and preparations.
  std::vector<std::pair<int, absl::Status>> results_ ABSL_GUARDED_BY(mutex_);
  std::atomic<bool> results_ready_{false};
  std::thread committer_;
};

}  // namespace weir::connectors

#endif  // WEIR_CONNECTORS_KAFKA_KAFKA_TRANSACTIONAL_SINK_H_
