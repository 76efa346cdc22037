// Write-ahead-log sinks: output into any system, written only once the
// checkpoint covering it has completed.
//
// A sink subclasses WriteAheadSink and says how to write one batch; the
// runtime keeps the records between two barriers in the checkpoint and
// hands them over when their checkpoint completes:
//
//   every record                   kept (serialized) in the open batch
//   barrier of checkpoint n        the open batch becomes batch n; the
//                                  batches not yet written go into the
//                                  checkpoint (operator state)
//   checkpoint n completed         WriteBatch then MarkWritten for every
//                                  batch <= n, oldest first
//   checkpoint n aborted/expired   nothing: its batch is written with the
//                                  next completed checkpoint
//   restart from checkpoint n      the batches n lists are written again,
//                                  except those IsWritten says are written
//   fresh start (no checkpoint)    subtask 0 calls ForgetWritten() first
//   end of a bounded input         (after the final checkpoint) whatever is
//                                  left is written at once
//
// Every batch has an id, random and unique among all batches of all runs,
// kept with it in the checkpoint. The checkpoint committer (IsWritten /
// MarkWritten) records in the external system which batch ids are written,
// so that a restart does not write a completed batch again. Without one
// (the defaults), every batch of the restored checkpoint is written again
// after a failure. (Checkpoint ids are no identity: a job restored from an
// older savepoint numbers its checkpoints from that savepoint's on.)
//
// What this strategy cannot rule out: a crash in the middle of WriteBatch,
// after part of the batch reached the external system and before it was
// marked written. The restart writes the whole batch again, so that part is
// written twice (docs/exactly-once.md measures how much). A sink that can
// record the mark in the same write as the batch's last part does so in
// WriteBatch (and leaves MarkWritten empty), which closes the window for
// batches it writes in one part. A system that can write a whole batch and
// its mark atomically can use a two-phase-commit sink
// (weir/two_phase_commit.h) instead, which has no window at all.
//
// Records wait in memory from their arrival until their checkpoint
// completes, and every batch not yet written is stored in each checkpoint.
//
// Use: stream.SinkTo("name", [] { return std::make_unique<MySink>(...); });
// The job then needs checkpoints (execution.checkpointing.interval) in
// EXACTLY_ONCE mode; the JobManager refuses it otherwise.
//
// Rescaling: the batches of every old subtask o are written (and checked
// with IsWritten(o, ...)) by the new subtask o % parallelism.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "weir/operator.h"
#include "weir/serializer.h"
#include "weir/two_phase_commit.h"

namespace weir {

namespace internal {
struct WriteAheadSinkTag {};
}  // namespace internal

// One batch: the records one subtask received between two barriers.
struct WriteAheadBatch {
  int subtask = 0;            // the subtask whose input it was
  int64_t checkpoint_id = 0;  // whose barrier closed it (0: the end of a bounded input)
  std::string id;             // 32 hex digits, random: what the committer records
};

template <typename T, typename S = Serializer<T>>
class WriteAheadSink : public internal::WriteAheadSinkTag {
 public:
  using Record = T;
  using RecordSerializer = S;

  virtual ~WriteAheadSink() = default;

  // Before anything else, once per task.
  virtual void Open(const SinkContext& context) {}
  // Writes `batch`'s records, once its checkpoint has completed. Throws
  // when it cannot; the task then fails and the batch is written again
  // after the restart.
  virtual void WriteBatch(const WriteAheadBatch& batch, const std::vector<T>& records) = 0;
  // The checkpoint committer: whether `batch` was written completely by an
  // earlier attempt. Asked for restored batches.
  virtual bool IsWritten(const WriteAheadBatch& batch) { return false; }
  // Records that `batch` is written (right after WriteBatch).
  virtual void MarkWritten(const WriteAheadBatch& batch) {}
  // A fresh start of the job: what earlier runs marked written can go (no
  // batch of this run has their ids). Called by subtask 0 only, before any
  // batch is written.
  virtual void ForgetWritten() {}
  // Last, on every path.
  virtual void Close() {}
};

namespace internal {

// Runs a WriteAheadSink as a sink operator. The batches of the checkpoints
// not yet known complete live in union list operator state as chunks
// "<checkpoint id><writer subtask><writer parallelism><batch id><records>",
// each record a length-prefixed field; a batch is one or more chunks.
template <typename Sink>
class WriteAheadOperator final : public StreamOperator {
 public:
  using T = typename Sink::Record;
  using S = typename Sink::RecordSerializer;

  explicit WriteAheadOperator(std::unique_ptr<Sink> sink) : sink_(std::move(sink)) {}

  void InitializeState(OperatorContext& context) override {
    context_ = &context;
    state_ = context.operator_state()->GetUnionListState(kStateName);
    sink_->Open(SinkContextOf(context));
    opened_ = true;
    subtask_ = context.subtask_index();
    parallelism_ = context.parallelism();
    if (!context.is_restored()) {
      if (subtask_ == 0) sink_->ForgetWritten();
      return;
    }
    // The batches this subtask answers for, by (checkpoint, old subtask,
    // id): written unless the committer knows them.
    std::map<std::tuple<int64_t, int, std::string>, std::vector<std::string>> restored;
    for (const std::string& entry : state_->Get()) {
      size_t pos = 0;
      const auto checkpoint_id = static_cast<int64_t>(ReadVarint(entry, &pos));
      const auto subtask = static_cast<int>(ReadVarint(entry, &pos));
      const auto parallelism = static_cast<int>(ReadVarint(entry, &pos));
      if (parallelism < 1 || subtask >= parallelism) {
        throw std::runtime_error("corrupt write-ahead state: subtask beyond its parallelism");
      }
      std::string id(ReadField(entry, &pos));
      if (subtask % parallelism_ != subtask_) continue;
      restored[{checkpoint_id, subtask, std::move(id)}].push_back(entry.substr(pos));
    }
    state_->Clear();
    for (const auto& [key, chunks] : restored) {
      const WriteAheadBatch batch{std::get<1>(key), std::get<0>(key), std::get<2>(key)};
      if (sink_->IsWritten(batch)) continue;
      Write(batch, chunks);
    }
  }

  void Open(OperatorContext& context, RecordOutput* output) override {}

  void Process(void* record) override {
    if (open_.empty() || open_.back().size() >= kChunkBytes) open_.emplace_back();
    WriteField<T, S>(*static_cast<const T*>(record), open_.back());
  }

  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override {
    if (open_.empty()) return;  // nothing since the last barrier
    pending_.push_back(Batch{{subtask_, checkpoint_id, NewBatchId()}, std::move(open_)});
    open_.clear();
  }

  void SnapshotState(const CheckpointInfo& checkpoint) override {
    std::vector<std::string> entries;
    for (const Batch& batch : pending_) {
      for (const std::string& chunk : batch.chunks) {
        std::string entry;
        WriteVarint(static_cast<uint64_t>(batch.info.checkpoint_id), entry);
        WriteVarint(static_cast<uint64_t>(subtask_), entry);
        WriteVarint(static_cast<uint64_t>(parallelism_), entry);
        WriteVarint(batch.info.id.size(), entry);
        entry.append(batch.info.id);
        entry.append(chunk);
        entries.push_back(std::move(entry));
      }
    }
    state_->Update(std::move(entries));
  }

  void NotifyCheckpointComplete(int64_t checkpoint_id) override {
    // Oldest first; the batches of aborted checkpoints go with this one.
    auto end = std::find_if(pending_.begin(), pending_.end(),
                            [checkpoint_id](const Batch& b) { return b.info.checkpoint_id > checkpoint_id; });
    for (auto it = pending_.begin(); it != end; ++it) Write(it->info, it->chunks);
    pending_.erase(pending_.begin(), end);
  }

  void EndInput() override {
    // A final checkpoint takes the open batch into its state and writes it.
    if (context_->checkpoint_follows_end_of_input()) return;
    for (const Batch& batch : pending_) Write(batch.info, batch.chunks);
    pending_.clear();
    if (!open_.empty()) Write(WriteAheadBatch{subtask_, 0, NewBatchId()}, open_);
    open_.clear();
  }

  void Close() override {
    if (!opened_) return;
    opened_ = false;
    sink_->Close();
  }

  ~WriteAheadOperator() override {
    try {
      Close();
    } catch (...) {
      // Destructors do not throw.
    }
  }

 private:
  static constexpr char kStateName[] = "weir.write-ahead.batches";
  // Records go into chunks of about this size (one state entry each).
  static constexpr size_t kChunkBytes = 1 << 20;

  struct Batch {
    WriteAheadBatch info;
    std::vector<std::string> chunks;
  };

  void Write(const WriteAheadBatch& batch, const std::vector<std::string>& chunks) {
    std::vector<T> records;
    for (const std::string& chunk : chunks) {
      size_t pos = 0;
      while (pos < chunk.size()) records.push_back(S::Read(ReadField(chunk, &pos)));
    }
    sink_->WriteBatch(batch, records);
    sink_->MarkWritten(batch);
  }

  // 128 bits from the operating system's random source (one call per
  // batch: a checkpoint interval's worth of records).
  std::string NewBatchId() {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id;
    for (int word = 0; word < 4; ++word) {
      uint32_t bits = random_();
      for (int i = 0; i < 8; ++i, bits >>= 4) id.push_back(kHex[bits & 0xf]);
    }
    return id;
  }

  std::unique_ptr<Sink> sink_;
  OperatorListState* state_ = nullptr;
  OperatorContext* context_ = nullptr;  // from InitializeState
  bool opened_ = false;
  int subtask_ = 0;
  int parallelism_ = 1;
  std::vector<std::string> open_;  // chunks of the batch being filled
  std::vector<Batch> pending_;     // closed at a barrier, in checkpoint order
  std::random_device random_;
};

}  // namespace internal
}  // namespace weir
