// OperatorChain: the chained operators of one task and how they are wired —
// in-chain as direct calls with C++ objects, out of the chain through
// RecordWriters into the task's result partitions — with the lifecycle the
// task drives: state initialization and Open, records, the checkpoint hooks,
// end of input, Close.
//
// The chain owns the operators, their contexts and state, its partitions and
// writers. It runs code of the job's library: it must be destroyed before the
// library may be unloaded.
//
// Thread-safety: not thread-safe; the task thread creates it and calls every
// method, except that the partitions it reports through `on_partition` may be
// released from any thread (cancellation).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "connectors/registry.h"
#include "jobgraph/job_library.h"
#include "taskmanager/metrics/task_metrics.h"
#include "taskmanager/network/record_writer.h"
#include "taskmanager/network/result_partition.h"
#include "taskmanager/state/keyed_state_backend.h"
#include "taskmanager/state/operator_state.h"
#include "weir/operator.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// Records counted at the chain's borders; read by other threads for metrics.
struct ChainCounters {
  std::atomic<int64_t>* records_in = nullptr;   // records entering the chain
  std::atomic<int64_t>* records_out = nullptr;  // records leaving it
  // The highest watermark that went through the chain (kMinWatermark: none).
  std::atomic<int64_t>* watermark = nullptr;
};

struct OperatorChainOptions {
  network::PartitionManager* partitions = nullptr;
  // Buffers each subpartition of the chain's outputs holds before the task
  // waits (taskmanager.network.memory.max-buffers-per-channel).
  int max_buffers_per_channel = 4;
  int segment_size = 32 * 1024;
  absl::Duration buffer_timeout = absl::Milliseconds(100);
  // pipeline.watermark.stall-warning, for the sources (zero: off).
  absl::Duration event_time_stall_warning = absl::Seconds(60);
  // Used when the deployment descriptor carries none.
  int max_parallelism = 128;
  // The connectors that vertices name (VertexSpec::connector); null: none.
  std::shared_ptr<const connectors::ConnectorRegistry> connectors;
  // Where keyed state lives when the deployment descriptor does not say:
  // "rocksdb" or "hashmap".
  std::string state_backend = "rocksdb";
  int64_t rocksdb_write_buffer_bytes = 32 << 20;
  // The rocksdb backend's instances go under <local_state_dir>/<job id>/.
  std::string local_state_dir = "/tmp/weir-state";
  // Where the operators' metrics go (the task's); null: a registry of the
  // chain's own.
  TaskMetrics* metrics = nullptr;
  // Called with each result partition as soon as it is registered.
  std::function<void(const std::shared_ptr<network::ResultPartition>&)> on_partition;
};

// The state of one operator of the chain in one checkpoint.
struct OperatorSnapshot {
  // The operator's id (its vertex's uid).
  std::string uid;
  // Restoring: whether the checkpoint held state for it (an operator new to
  // the job starts without).
  bool present = true;
  OperatorStateSnapshot operator_state;
  // Taking a checkpoint: the asynchronous part of the keyed state (keyed
  // operators only).
  std::shared_ptr<KeyedStateSnapshot> keyed;
  // Restoring: the keyed state as the task's snapshot file recorded it (one
  // entry), or as every old subtask's file did (rescaling); the backend takes
  // the key groups of its range from them.
  std::vector<KeyedStateRestore> keyed_restore;
};

// The state of every operator of the chain, by position in the chain.
struct ChainSnapshot {
  int64_t checkpoint_id = 0;
  // Taken after EndInput (the chain's input had ended).
  bool input_ended = false;
  std::vector<OperatorSnapshot> operators;
  // Where the snapshot's time went, for the slow-checkpoint log: the
  // operators' SnapshotState (write-backs, timers, operator state) and the
  // keyed state backends' snapshots.
  absl::Duration operators_time;
  absl::Duration keyed_time;
};

class OperatorChain {
 public:
  // Instantiates the operators of `tdd.vertex_ids()` from `job` and wires
  // them; registers the output partitions. Opens nothing. `restored`, when
  // set, is this subtask's share of a checkpoint (one entry per operator).
  static absl::StatusOr<std::unique_ptr<OperatorChain>> Create(const v1::TaskDeploymentDescriptor& tdd,
                                                              const jobgraph::LoadedJob& job,
                                                              OperatorChainOptions options, ChainCounters counters,
                                                              const ChainSnapshot* restored = nullptr);
  ~OperatorChain();  // closes what was opened, unregisters the partitions

  OperatorChain(const OperatorChain&) = delete;
  OperatorChain& operator=(const OperatorChain&) = delete;

  // InitializeState on every operator, then Open from the tail to the head
  // (so nothing is emitted into an unopened operator).
  void InitializeStateAndOpen();

  // The head: a source, or the operator that takes the task's input.
  SourceOperator* source() { return source_.get(); }
  // Feeds a deserialized input record into the head, counting it.
  RecordOutput* input() { return head_input_.get(); }
  // The record type of the task's input (the upstream vertex's output).
  const TypeOps* input_type() const;
  // Event time (docs/design/event-time.md): the timestamp of the input
  // records fed next (kNoTimestamp for none), and the task's watermark and
  // idleness (WatermarkValve) into the head, through every operator's
  // OnWatermark, out to the writers.
  void SetElementTimestamp(int64_t timestamp) { element_time_ = timestamp; }
  void ProcessWatermark(int64_t watermark);
  void ProcessWatermarkStatus(bool idle);
  // A source reached the end of its input: sends kMaxWatermark (once), so
  // that event time ends before the final checkpoint. Nothing for chains
  // without a source.
  void EndSourceEventTime();
  // OnPeriodicEmit of the source and every operator (watermark strategies
  // emit there).
  void PeriodicEmit();
  // Timers (keyed operators): fires every processing-time timer due at
  // `now_ms`, and says when the next one is due. Event-time timers fire
  // with the watermarks (ProcessWatermark).
  void FireProcessingTimers(int64_t now_ms);
  std::optional<int64_t> NextProcessingTimer() const;

  // Sends buffers whose buffer timeout has passed.
  void FlushDue(absl::Time now);
  // The task is about to wait for input: StreamOperator::OnIdle of every
  // operator, then the buffers whose timeout has passed.
  void Idle(absl::Time now);

  // The checkpoint hooks, head to tail.
  void PrepareSnapshotPreBarrier(int64_t checkpoint_id);
  // Sends checkpoint barrier `checkpoint_id` on every output, behind every
  // record emitted before.
  void BroadcastBarrier(int64_t checkpoint_id, int64_t timestamp_ms);
  // SnapshotState on every operator, then the synchronous part of their
  // state's snapshot. An error (e.g. a full disk) fails the checkpoint.
  absl::StatusOr<ChainSnapshot> SnapshotState(const CheckpointInfo& checkpoint);
  // After the synchronous part, on the task thread: deferred work of the
  // operators' runtime services (timers old enough go into the backend).
  // Returns how many timers went into the keyed state.
  size_t AfterSnapshot();
  void NotifyCheckpointComplete(int64_t checkpoint_id);
  void NotifyCheckpointAborted(int64_t checkpoint_id);

  // Bounded input ended (end of data): EndInput head to tail, unless the
  // restored snapshot was taken after they ran, then END_OF_DATA to every
  // consumer. Checkpoints go on after it. `checkpoint_follows`: the task
  // waits for a final checkpoint, which commits what the operators hold
  // (OperatorContext::checkpoint_follows_end_of_input).
  void EndInput(bool checkpoint_follows = false);
  // Whether EndInput ran (in this attempt, or before the restored snapshot).
  bool input_ended() const { return input_ended_; }
  // A task restored as finished: its operators never run, so EndInput only
  // sends END_OF_DATA.
  void MarkInputEnded() { input_ended_ = true; }
  // The task ends: END_OF_INPUT to every consumer (after END_OF_DATA, which
  // goes first if EndInput did not send it).
  void EndPartitions();
  // Whether the consumers took everything the chain produced; once true, the
  // partitions are left to the consumers instead of being released.
  bool AllConsumed();

 private:
  class Context;
  class Output;
  class FanOutOutput;
  class Discard;

  OperatorChain(const v1::TaskDeploymentDescriptor& tdd, const jobgraph::LoadedJob& job, OperatorChainOptions options,
                ChainCounters counters);
  absl::Status Build(const ChainSnapshot* restored);
  absl::StatusOr<std::unique_ptr<KeyedStateBackend>> CreateKeyedState(const VertexSpec& vertex,
                                                                      state::KeyGroupRange range, int max_parallelism);
  // Every operator's hooks, head first; the source stands at position 0.
  std::vector<CheckpointListener*> Listeners();
  void CloseAll();

  const v1::TaskDeploymentDescriptor& tdd_;
  const jobgraph::LoadedJob& job_;
  const OperatorChainOptions options_;
  const ChainCounters counters_;
  // options_.metrics, or own_metrics_. Declared before the contexts, whose
  // groups point into it.
  std::unique_ptr<TaskMetrics> own_metrics_;
  TaskMetrics* const metrics_;

  std::vector<std::unique_ptr<Context>> contexts_;
  std::unique_ptr<SourceOperator> source_;
  std::vector<std::unique_ptr<StreamOperator>> operators_;  // [0] is null for a source
  std::vector<std::shared_ptr<network::ResultPartition>> partitions_;
  std::vector<std::unique_ptr<network::RecordWriter>> writers_;
  std::vector<std::unique_ptr<RecordOutput>> outputs_owned_;
  std::vector<RecordOutput*> outputs_;  // each operator's output
  std::unique_ptr<RecordOutput> head_input_;
  std::unique_ptr<RecordOutput> discard_;
  // The event time of the record in flight through the chain.
  int64_t element_time_ = kNoTimestamp;
  bool source_event_time_ended_ = false;
  std::vector<bool> opened_;
  bool consumed_ = false;
  // EndInput ran, here or before the restored snapshot.
  bool input_ended_ = false;
  // What the contexts answer for checkpoint_follows_end_of_input.
  bool checkpoint_follows_end_ = false;
};

}  // namespace weir::taskmanager
