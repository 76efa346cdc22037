// SubtaskCheckpointer: takes one task's part of a checkpoint.
//
// On the task thread, between two records (from a trigger mail for a
// source, or when the barrier handler says every barrier is in):
//   1. PrepareSnapshotPreBarrier on every operator (sinks flush),
//   2. the barrier goes out on every output, behind every record before it,
//   3. SnapshotState on every operator and a copy of their state.
// Then, on the TaskManager's SnapshotUploader thread: encode, write the file
// into <checkpoint_dir>/chk-<n>/, and acknowledge with its handle (or
// decline with the reason when that fails).
//
// Thread-safety: Checkpoint and Decline on the task thread. The uploader work
// it submits holds copies of what it needs, never the task.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "taskmanager/checkpointing/snapshot_uploader.h"
#include "taskmanager/operator_chain.h"
#include "weir/v1/checkpoint.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// Where a task's checkpoint outcome goes (the JobManager). Called from the
// uploader thread.
class CheckpointResponder {
 public:
  virtual ~CheckpointResponder() = default;
  virtual void Acknowledge(const v1::AcknowledgeCheckpointRequest& ack) = 0;
  virtual void Decline(const v1::DeclineCheckpointRequest& decline) = 0;
};

// <job checkpoint dir>/chk-<id>: the directory of one checkpoint.
std::string CheckpointDirectory(const std::string& job_checkpoint_dir, int64_t checkpoint_id);

class SubtaskCheckpointer {
 public:
  // `tdd` outlives this object; `uploader` and `responder` outlive the
  // uploader's work (they belong to the TaskManager). When the checkpoint
  // directory is in an object store, snapshots are staged below
  // `staging_root` (local disk) and uploaded from there (remote_snapshot.h).
  SubtaskCheckpointer(const v1::TaskDeploymentDescriptor& tdd, SnapshotUploader* uploader,
                      CheckpointResponder* responder, std::string staging_root = "/tmp");

  // Takes checkpoint `checkpoint_id` of `chain` (steps above). `alignment`
  // is how long inputs were held back for it. Errors from user code
  // propagate as exceptions, as for records.
  absl::Status Checkpoint(OperatorChain& chain, int64_t checkpoint_id, int64_t timestamp_ms,
                          absl::Duration alignment);

  // Declines `checkpoint_id` with `reason` (e.g. a newer barrier overtook it).
  void Decline(int64_t checkpoint_id, const std::string& reason);

  bool enabled() const { return !tdd_.checkpoint_dir().empty(); }

 private:
  const v1::TaskDeploymentDescriptor& tdd_;
  SnapshotUploader* const uploader_;
  CheckpointResponder* const responder_;
  const std::string staging_root_;
  int64_t last_checkpoint_ = 0;
};

}  // namespace weir::taskmanager
