#include "taskmanager/checkpointing/subtask_checkpointer.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/fs/file_system_registry.h"
#include "common/io/durable_batch.h"
#include "common/logging/logging.h"
#include "common/process/fault_injection.h"
#include "common/status_macros.h"
#include "taskmanager/checkpointing/remote_snapshot.h"
#include "taskmanager/checkpointing/snapshot_file.h"

namespace weir::taskmanager {
namespace {

// A synchronous part this long is logged with its parts.
constexpr absl::Duration kSlowSynchronousPart = absl::Milliseconds(100);

}  // namespace

std::string CheckpointDirectory(const std::string& job_checkpoint_dir, int64_t checkpoint_id) {
  return absl::StrCat(job_checkpoint_dir, "/chk-", checkpoint_id);
}

SubtaskCheckpointer::SubtaskCheckpointer(const v1::TaskDeploymentDescriptor& tdd, SnapshotUploader* uploader,
                                         CheckpointResponder* responder, std::string staging_root)
    : tdd_(tdd), uploader_(uploader), responder_(responder), staging_root_(std::move(staging_root)) {}

absl::Status SubtaskCheckpointer::Checkpoint(OperatorChain& chain, int64_t checkpoint_id, int64_t timestamp_ms,
                                             absl::Duration alignment) {
  if (!enabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", checkpoint_id, " reached task ", tdd_.task_id(), ", which has checkpoints off"));
  }
  if (checkpoint_id <= last_checkpoint_) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", checkpoint_id, " came after checkpoint ",
                                                      last_checkpoint_, ": checkpoint ids must grow"));
  }
  last_checkpoint_ = checkpoint_id;
  const absl::Time start = absl::Now();
  // The first barrier came `alignment` before this call.
  const absl::Duration start_delay =
      std::max(absl::ZeroDuration(), start - alignment - absl::FromUnixMillis(timestamp_ms));
  chain.PrepareSnapshotPreBarrier(checkpoint_id);
  const absl::Duration pre_barrier = absl::Now() - start;
  fault::MaybeCrash(fault::Point::kTaskManagerAfterPreCommit, checkpoint_id);
  chain.BroadcastBarrier(checkpoint_id, timestamp_ms);
  const absl::Time barrier_out = absl::Now();
  absl::StatusOr<ChainSnapshot> taken = chain.SnapshotState(CheckpointInfo{checkpoint_id, timestamp_ms});
  const absl::Duration sync = absl::Now() - start;
  if (sync >= kSlowSynchronousPart) {
    // Where the task's input waited: the operators' flush, the barrier
    // waiting for room in the output (backpressure), or the snapshot.
    logging::Get("task")
        ->info("task {}: checkpoint {}: synchronous part {} ms (flush before the barrier {} ms, barrier waiting for "
               "output buffers {} ms, snapshot {} ms: operators {} ms, keyed state backends {} ms)",
               tdd_.task_id(), checkpoint_id, absl::ToInt64Milliseconds(sync),
               absl::ToInt64Milliseconds(pre_barrier),
               absl::ToInt64Milliseconds(barrier_out - start - pre_barrier),
               absl::ToInt64Milliseconds(absl::Now() - barrier_out),
               absl::ToInt64Milliseconds(taken.ok() ? taken->operators_time : absl::ZeroDuration()),
               absl::ToInt64Milliseconds(taken.ok() ? taken->keyed_time : absl::ZeroDuration()));
  }
  if (!taken.ok()) {
    chain.AfterSnapshot();
    // The barrier is out, so the task goes on; only this checkpoint fails.
    Decline(checkpoint_id, absl::StrCat("taking the snapshot failed: ", taken.status().message()));
    return absl::OkStatus();
  }
  ChainSnapshot snapshot = std::move(*taken);

  // Copies of what the asynchronous part needs: the task may be gone by then.
  v1::TaskDeploymentDescriptor identity;
  identity.set_job_id(tdd_.job_id());
  identity.set_attempt(tdd_.attempt());
  identity.set_task_id(tdd_.task_id());
  *identity.mutable_vertex_ids() = tdd_.vertex_ids();
  *identity.mutable_operator_uids() = tdd_.operator_uids();
  identity.set_subtask_index(tdd_.subtask_index());
  identity.set_parallelism(tdd_.parallelism());
  // In an object store the snapshot is written into a staging directory of
  // the same layout first, then uploaded (remote_snapshot.h).
  const std::string remote_dir =
      fs::IsObjectStoreUri(tdd_.checkpoint_dir()) ? CheckpointDirectory(tdd_.checkpoint_dir(), checkpoint_id) : "";
  const std::string dir = remote_dir.empty() ? CheckpointDirectory(tdd_.checkpoint_dir(), checkpoint_id)
                                             : StagingCheckpointDir(staging_root_, tdd_.task_id(), checkpoint_id);
  CheckpointResponder* responder = responder_;
  const absl::Time queued_at = absl::Now();
  const bool queued = uploader_->Submit([identity = std::move(identity), snapshot = std::move(snapshot), dir,
                                         remote_dir, responder, checkpoint_id, start_delay, alignment, sync,
                                         pre_barrier, queued_at] {
    const absl::Time async_start = absl::Now();
    StateFilesSummary files;
    absl::Status staged;
    if (!remote_dir.empty()) {
      RemoveStaging(dir);  // an earlier attempt's leftovers of this id
      std::error_code ec;
      std::filesystem::create_directories(dir, ec);
      if (ec) staged = absl::UnavailableError(absl::StrCat("creating the staging directory ", dir, ": ", ec.message()));
    }
    // Everything this task writes for the checkpoint is synced together,
    // once, at the end (common/io/durable_batch.h); a staging directory is
    // not synced at all (the store makes the upload durable), and RocksDB's
    // files are linked into it, not copied.
    io::DurableBatch batch(/*durable=*/remote_dir.empty());
    absl::StatusOr<std::string> encoded =
        staged.ok() ? EncodeTaskSnapshot(identity, snapshot, dir, &files, &batch) : absl::StatusOr<std::string>(staged);
    absl::StatusOr<v1::TaskStateHandle> handle =
        encoded.ok() ? WriteTaskSnapshot(dir, identity, *encoded, files, &batch)
                     : absl::StatusOr<v1::TaskStateHandle>(encoded.status());
    const absl::Time staged_at = absl::Now();
    if (handle.ok() && !remote_dir.empty()) {
      absl::StatusOr<int64_t> uploaded = UploadStagedSnapshot(dir, remote_dir, batch.linked_prefixes());
      if (!uploaded.ok()) handle = Annotate(uploaded.status(), absl::StrCat("uploading to ", remote_dir));
    }
    if (!remote_dir.empty()) RemoveStaging(dir);
    if (!handle.ok()) {
      static const std::shared_ptr<spdlog::logger> log = logging::Get("task");
      log->warn("task {}: checkpoint {}: writing the snapshot failed: {}", identity.task_id(), checkpoint_id,
                handle.status().message());
      v1::DeclineCheckpointRequest decline;
      decline.set_job_id(identity.job_id());
      decline.set_attempt(identity.attempt());
      decline.set_task_id(identity.task_id());
      decline.set_checkpoint_id(checkpoint_id);
      decline.set_reason(absl::StrCat("writing the snapshot failed: ", handle.status().message()));
      responder->Decline(decline);
      return;
    }
    v1::AcknowledgeCheckpointRequest ack;
    ack.set_job_id(identity.job_id());
    ack.set_attempt(identity.attempt());
    ack.set_task_id(identity.task_id());
    ack.set_checkpoint_id(checkpoint_id);
    *ack.mutable_state() = std::move(*handle);
    ack.set_start_delay_ms(absl::ToInt64Milliseconds(start_delay));
    ack.set_alignment_ms(absl::ToInt64Milliseconds(alignment));
    ack.set_sync_ms(absl::ToInt64Milliseconds(sync));
    ack.set_pre_barrier_ms(absl::ToInt64Milliseconds(pre_barrier));
    ack.set_async_ms(absl::ToInt64Milliseconds(absl::Now() - async_start));
    static const std::shared_ptr<spdlog::logger> log = logging::Get("task");
    log->debug("task {}: checkpoint {}: asynchronous part {} ms (writing {} ms, uploading {} ms), after {} ms in the "
               "uploader's queue",
               identity.task_id(), checkpoint_id, ack.async_ms(), absl::ToInt64Milliseconds(staged_at - async_start),
               absl::ToInt64Milliseconds(absl::Now() - staged_at), absl::ToInt64Milliseconds(async_start - queued_at));
    responder->Acknowledge(ack);
  });
  // Deferred work of the operators (timers waiting since the last snapshot
  // go into the keyed state) only once the asynchronous part is queued: it
  // is not part of this checkpoint, which must not wait for it.
  const absl::Time after_start = absl::Now();
  const size_t timers = chain.AfterSnapshot();
  const absl::Duration after = absl::Now() - after_start;
  if (after >= kSlowSynchronousPart) {
    logging::Get("task")->info(
        "task {}: checkpoint {}: after the snapshot, writing {} timers still waiting after their hand-overs into the keyed "
        "state took {} ms of the task thread",
        tdd_.task_id(), checkpoint_id, timers, absl::ToInt64Milliseconds(after));
  }
  if (!queued) return absl::CancelledError("the TaskManager is shutting down");
  return absl::OkStatus();
}

void SubtaskCheckpointer::Decline(int64_t checkpoint_id, const std::string& reason) {
  v1::DeclineCheckpointRequest decline;
  decline.set_job_id(tdd_.job_id());
  decline.set_attempt(tdd_.attempt());
  decline.set_task_id(tdd_.task_id());
  decline.set_checkpoint_id(checkpoint_id);
  decline.set_reason(reason);
  CheckpointResponder* responder = responder_;
  uploader_->Submit([responder, decline = std::move(decline)] { responder->Decline(decline); });
}

}  // namespace weir::taskmanager
