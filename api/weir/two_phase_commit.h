// Two-phase-commit sinks: exactly-once output into any system that can keep
// a transaction open across a crash of its writer and commit it later.
//
// A sink subclasses TwoPhaseCommitSink and says how to begin, write,
// pre-commit, commit and abort one transaction; the runtime ties those to
// checkpoints (docs/exactly-once.md):
//
//   first record after a barrier     BeginTransaction()
//   every record                     Write(record)
//   barrier of checkpoint n          PreCommit(n) -> committable, kept in the
//                                    checkpoint (operator state)
//   checkpoint n completed           Commit(c) for every committable <= n,
//                                    oldest first
//   checkpoint n aborted/expired     nothing: its committables go with the
//                                    next completed checkpoint
//   restart from checkpoint n        Commit(c) again for n's committables
//                                    (they may or may not have been
//                                    committed), then AbortLingering(...)
//                                    for what was opened after n
//   cancel or failure                Abort() of the open transaction;
//                                    pre-committed ones stay for recovery
//   end of a bounded input           (after the final checkpoint) PreCommit(0)
//                                    and Commit of anything left
//
// An interval without records opens no transaction. Commit must be
// idempotent, and it must throw (failing the task) when a committable of a
// completed checkpoint cannot be committed: that is lost output, never to
// pass silently. Throw weir::UnrecoverableError when the transaction is
// gone for good (the job then fails instead of restarting into the same
// loss), anything else for a failure a retry may fix.
//
// Use: stream.SinkTo("files", [] { return std::make_unique<MySink>(...); });
// The job then needs checkpoints (execution.checkpointing.interval) in
// EXACTLY_ONCE mode; the JobManager refuses it otherwise.
//
// Rescaling: the committables of every old subtask o are committed, and its
// leftovers aborted, by the new subtask o % parallelism.
//
// Bounded input: a job with a two-phase-commit sink ends with a final
// checkpoint (its sources wait for a checkpoint after their end before they
// end their input), which commits the last transaction as any other. At
// EndInput, what is still open or pending (nothing, normally) is
// pre-committed and committed at once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "weir/operator.h"
#include "weir/serializer.h"

namespace weir {

// What a sink instance knows about itself.
struct SinkContext {
  std::string operator_name;
  int subtask_index = 0;
  int parallelism = 1;
  // The task started from a checkpoint or savepoint.
  bool restored = false;
  // For -D job settings (OperatorContext::JobConfig) and metrics; valid
  // while the sink is open.
  OperatorContext* operator_context = nullptr;
};

namespace internal {

// What a sink operator tells its sink about itself.
inline SinkContext SinkContextOf(OperatorContext& context) {
  SinkContext sink_context;
  sink_context.operator_name = context.operator_name();
  sink_context.subtask_index = context.subtask_index();
  sink_context.parallelism = context.parallelism();
  sink_context.restored = context.is_restored();
  sink_context.operator_context = &context;
  return sink_context;
}

}  // namespace internal

// `Committable` describes one pre-committed transaction (e.g. a file name
// or a transaction id); CS serializes it into the checkpoint.
template <typename T, typename Committable, typename CS = Serializer<Committable>>
class TwoPhaseCommitSink {
 public:
  using Record = T;
  using CommittableType = Committable;
  using CommittableSerializer = CS;

  virtual ~TwoPhaseCommitSink() = default;

  // Before anything else, once per task.
  virtual void Open(const SinkContext& context) {}
  // Starts a transaction; the records that follow go into it.
  virtual void BeginTransaction() = 0;
  virtual void Write(const T& record) = 0;
  // Makes the open transaction durable but not visible and describes it.
  // `checkpoint_id` is 0 at the end of a bounded input.
  virtual Committable PreCommit(int64_t checkpoint_id) = 0;
  // Makes a pre-committed transaction visible. Idempotent; throws when it
  // cannot (the output would be lost): weir::UnrecoverableError when no
  // retry can succeed.
  virtual void Commit(const Committable& committable) = 0;
  // Commit of a restored committable, which may have been committed (and
  // its output consumed) long before; the default is Commit.
  virtual void CommitOnRecovery(const Committable& committable) { Commit(committable); }
  // Discards the open (not pre-committed) transaction.
  virtual void Abort() = 0;
  // On start, after the restored committables were committed: discards
  // whatever subtask `old_subtask` of an earlier run of this job left open
  // that none of `restored` covers (the restored committables this subtask
  // was given: at an unchanged parallelism its own, after a rescale all;
  // empty on a fresh start, when everything of `old_subtask` is a leftover).
  // Called for this subtask's own index, and on a restore also for the old
  // subtasks that map to it (o % parallelism == subtask_index).
  virtual void AbortLingering(int old_subtask, const std::vector<Committable>& restored) {}
  // Last, on every path; the open transaction was aborted or committed.
  virtual void Close() {}
};

namespace internal {

// Runs a TwoPhaseCommitSink as a sink operator: the committables of the
// checkpoints not yet known complete live in union list operator state, as
// entries "<checkpoint id><writer subtask><writer parallelism><committable>".
template <typename Sink>
class TwoPhaseCommitOperator final : public StreamOperator {
 public:
  using T = typename Sink::Record;
  using Committable = typename Sink::CommittableType;
  using CS = typename Sink::CommittableSerializer;

  explicit TwoPhaseCommitOperator(std::unique_ptr<Sink> sink) : sink_(std::move(sink)) {}

  void InitializeState(OperatorContext& context) override {
    context_ = &context;
    state_ = context.operator_state()->GetUnionListState(kStateName);
    sink_->Open(SinkContextOf(context));
    opened_ = true;
    subtask_ = context.subtask_index();
    parallelism_ = context.parallelism();
    // Restored: commit what this subtask answers for, then clean up.
    std::vector<Committable> all;
    int old_parallelism = parallelism_;
    for (const std::string& entry : state_->Get()) {
      Entry e = Decode(entry);
      old_parallelism = std::max(old_parallelism, e.parallelism);
      if (e.subtask % parallelism_ == subtask_) sink_->CommitOnRecovery(e.committable);
      all.push_back(std::move(e.committable));
    }
    for (int o = subtask_; o < old_parallelism; o += parallelism_) sink_->AbortLingering(o, all);
    state_->Clear();
  }

  void Open(OperatorContext& context, RecordOutput* output) override {}

  void Process(void* record) override {
    if (!in_transaction_) {
      sink_->BeginTransaction();
      in_transaction_ = true;
    }
    sink_->Write(*static_cast<const T*>(record));
  }

  void PrepareSnapshotPreBarrier(int64_t checkpoint_id) override {
    if (!in_transaction_) return;  // nothing written since the last barrier
    pending_.emplace_back(checkpoint_id, sink_->PreCommit(checkpoint_id));
    in_transaction_ = false;
  }

  void SnapshotState(const CheckpointInfo& checkpoint) override {
    std::vector<std::string> entries;
    for (const auto& [id, committable] : pending_) entries.push_back(Encode(id, committable));
    state_->Update(std::move(entries));
  }

  void NotifyCheckpointComplete(int64_t checkpoint_id) override {
    // Oldest first; those of aborted checkpoints go with this one.
    auto end = std::find_if(pending_.begin(), pending_.end(),
                            [checkpoint_id](const auto& p) { return p.first > checkpoint_id; });
    for (auto it = pending_.begin(); it != end; ++it) sink_->Commit(it->second);
    pending_.erase(pending_.begin(), end);
  }

  void EndInput() override {
    // A final checkpoint pre-commits the open transaction and commits it.
    if (context_->checkpoint_follows_end_of_input()) return;
    if (in_transaction_) {
      pending_.emplace_back(0, sink_->PreCommit(0));
      in_transaction_ = false;
    }
    for (const auto& [id, committable] : pending_) sink_->Commit(committable);
    pending_.clear();
  }

  void Close() override {
    if (!opened_) return;
    opened_ = false;
    if (in_transaction_) {
      in_transaction_ = false;
      try {
        sink_->Abort();
      } catch (...) {
        sink_->Close();
        throw;
      }
    }
    sink_->Close();
  }

  ~TwoPhaseCommitOperator() override {
    try {
      Close();
    } catch (...) {
      // Destructors do not throw; the next start aborts what is left.
    }
  }

 private:
  static constexpr char kStateName[] = "weir.two-phase-commit.committables";

  struct Entry {
    int64_t checkpoint_id = 0;
    int subtask = 0;
    int parallelism = 1;
    Committable committable;
  };

  std::string Encode(int64_t checkpoint_id, const Committable& committable) const {
    std::string out;
    WriteVarint(static_cast<uint64_t>(checkpoint_id), out);
    WriteVarint(static_cast<uint64_t>(subtask_), out);
    WriteVarint(static_cast<uint64_t>(parallelism_), out);
    CS::Write(committable, out);
    return out;
  }

  static Entry Decode(std::string_view bytes) {
    size_t pos = 0;
    Entry e;
    e.checkpoint_id = static_cast<int64_t>(ReadVarint(bytes, &pos));
    e.subtask = static_cast<int>(ReadVarint(bytes, &pos));
    e.parallelism = static_cast<int>(ReadVarint(bytes, &pos));
    if (e.parallelism < 1 || e.subtask >= e.parallelism) {
      throw std::runtime_error("corrupt two-phase-commit state: subtask beyond its parallelism");
    }
    e.committable = CS::Read(bytes.substr(pos));
    return e;
  }

  std::unique_ptr<Sink> sink_;
  OperatorListState* state_ = nullptr;
  OperatorContext* context_ = nullptr;  // from InitializeState
  bool opened_ = false;
  bool in_transaction_ = false;
  int subtask_ = 0;
  int parallelism_ = 1;
  // Pre-committed, not yet committed, in checkpoint order.
  std::vector<std::pair<int64_t, Committable>> pending_;
};

}  // namespace internal
}  // namespace weir
