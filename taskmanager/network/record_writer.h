// RecordWriter: the RecordOutput at the end of a task's operator chain. It
// serializes each record once, picks the consumer subtask(s) by the edge's
// partitioning, and collects records per subpartition into data buffers that
// it hands to the task's ResultPartition when full, when due (FlushIfDue), or
// at the end of input.
//
// Handing a buffer over blocks while the subpartition is full: that is how
// backpressure reaches the producing task (and so, chain by chain, the
// sources). If the partition is released meanwhile (cancel, failure), every
// call that would hand over a buffer throws TaskCancelled.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "taskmanager/network/buffer.h"
#include "common/state/key_groups.h"
#include "taskmanager/network/result_partition.h"
#include "weir/job_graph.h"
#include "weir/operator.h"

namespace weir::taskmanager::network {

struct RecordWriterOptions {
  // A data buffer is handed over once it holds at least this many bytes
  // (default 32 KiB). A single larger record makes a buffer of its own.
  int max_buffer_bytes = 32 * 1024;
  // FlushIfDue hands over partly filled buffers when this much time has
  // passed since its previous flush (default 100 ms): the latency bound for
  // slow streams.
  absl::Duration flush_interval = absl::Milliseconds(100);
  // Number of key groups for kHash (default 128); must match the job's
  // max parallelism and the state backend.
  int max_parallelism = state::kDefaultMaxParallelism;
  // The producing vertex's parallelism, for kForward: when it differs from
  // the consumer count, forward behaves like rebalance so that every consumer
  // gets records. 0 (default): the same as the consumer count.
  int producer_parallelism = 0;
  // Event time (docs/design/event-time.md): records go out in timestamped
  // data buffers, each with its event time (EmitAt; Emit sends
  // weir::kNoTimestamp). Only edges downstream of a watermark strategy.
  bool timestamps = false;
};


// Thread-safety: not thread-safe; owned and used by one task thread.
// records_out() may be read from any thread.
class RecordWriter : public weir::RecordOutput {
 public:
  // `partition` has one subpartition per consumer subtask
  // (`num_consumers`); `type` serializes the records; `key` is required for
  // kHash. `subtask_index` is this producer's subtask: kForward sends there
  // (see RecordWriterOptions::producer_parallelism), and kRebalance starts
  // its round robin there.
  RecordWriter(std::shared_ptr<ResultPartition> partition, const weir::TypeOps* type,
               weir::Partitioning partitioning, weir::KeyFunction key, int num_consumers, int subtask_index,
               RecordWriterOptions options = {});

  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // Throws TaskCancelled when the partition has been released.
  void Emit(void* record) override;
  // Emit with the record's event time (RecordWriterOptions::timestamps;
  // without it the timestamp is dropped).
  void EmitAt(void* record, int64_t timestamp) override;

  // Hands over every non-empty buffer if the flush interval has passed since
  // the previous flush. Called by the task loop between records and while idle.
  void FlushIfDue(absl::Time now);
  // Hands over every non-empty buffer now.
  void FlushAll();
  // Flushes, then sends END_OF_DATA on every subpartition that has a
  // consumer (only this subtask's for a forward edge): no record follows,
  // barriers and watermarks still may (`final_checkpoint`: the task waits
  // for one). Emit must not be called afterwards.
  void EmitEndOfData(bool final_checkpoint);
  // END_OF_DATA first unless sent, then END_OF_INPUT the same way: nothing
  // follows.
  void EmitEndOfInput();
  // Flushes, then sends checkpoint barrier `checkpoint_id` where
  // EmitEndOfInput sends END_OF_INPUT, behind every record emitted before.
  // Neither waits for room in a full subpartition (ResultPartition::Add
  // over capacity): the barrier queues behind the data at once.
  void BroadcastBarrier(int64_t checkpoint_id, int64_t timestamp_ms);
  // Event time. Like barriers, a watermark goes out behind every record
  // emitted before it, where EmitEndOfInput sends END_OF_INPUT. One not
  // above the last one sent is dropped. A status says the stream is idle
  // (`idle`) or active again; after an idle status, the next record or
  // watermark is preceded by an active one. Each costs a credit and a slot
  // of the subpartition's queue, like a barrier: send them periodically,
  // not per record.
  void BroadcastWatermark(int64_t watermark);
  void BroadcastWatermarkStatus(bool idle);
  void EmitWatermark(int64_t watermark) override { BroadcastWatermark(watermark); }
  void EmitWatermarkStatus(bool idle) override { BroadcastWatermarkStatus(idle); }
  // The last watermark sent (kMinWatermark before the first).
  int64_t last_watermark() const { return last_watermark_; }

  // Records emitted (a broadcast record counts once).
  int64_t records_out() const { return records_out_.load(std::memory_order_relaxed); }
  const std::string& partition_id() const { return partition_->id(); }

 private:
  int NextRoundRobin();
  void Append(int subpartition, absl::string_view record, int64_t timestamp);
  // Serializes `record` and appends it where the partitioning says.
  void Route(void* record, int64_t timestamp);
  // A buffer for the records of one subpartition (timestamped or not).
  Buffer EmptyBuffer() const;
  // Rule of BroadcastWatermarkStatus: active again before what follows.
  void ActivateIfIdle();
  void Flush(int subpartition);
  void Hand(int subpartition, Buffer buffer);
  // Hands an event to every subpartition that has a consumer.
  void HandEvent(const Buffer& event);

  const std::shared_ptr<ResultPartition> partition_;
  const weir::TypeOps* const type_;
  const weir::KeyFunction key_;
  const int num_consumers_;
  const int subtask_index_;
  const RecordWriterOptions options_;
  // kForward with a different consumer count is handled as kRebalance.
  weir::Partitioning effective_partitioning_;

  std::vector<Buffer> pending_;  // one per subpartition
  std::string record_bytes_;     // scratch, reused per record
  std::string key_bytes_;        // scratch, reused per record
  int next_round_robin_;
  absl::Time next_flush_ = absl::InfinitePast();
  bool data_ended_ = false;  // END_OF_DATA sent
  bool ended_ = false;       // END_OF_INPUT sent
  // Set while BroadcastBarrier hands its flush and barrier over capacity.
  bool over_capacity_ = false;
  int64_t last_watermark_ = weir::kMinWatermark;
  bool idle_ = false;
  std::atomic<int64_t> records_out_{0};
};

}  // namespace weir::taskmanager::network
