// Task snapshot files: how a task's ChainSnapshot is written into a
// checkpoint's directory and read back at restore.
//
// File: the 8 bytes "WEIRTASK", a little-endian uint32 format version (1),
// then a serialized v1::TaskSnapshotProto. The handle sent to the JobManager
// names the file (relative to the checkpoint's directory), its size and its
// SHA-256, which the restore checks before it parses anything.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/io/durable_batch.h"
#include "taskmanager/operator_chain.h"
#include "weir/v1/checkpoint.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// "v<first vertex>-s<subtask>.snapshot": stable across attempts of a job.
std::string TaskSnapshotFileName(const v1::TaskDeploymentDescriptor& tdd);

// The keyed state files a snapshot wrote or refers to.
struct StateFilesSummary {
  int64_t written_bytes = 0;  // written by this checkpoint
  int64_t reused_bytes = 0;   // shared files an earlier checkpoint uploaded
  std::vector<std::string> shared;  // every shared file referred to
};

// Serializes `snapshot` (one entry per operator of tdd's chain), writing
// the asynchronous part of each operator's keyed state into
// `checkpoint_dir` (and the job's shared directory beside it) first: the
// file then refers to what it wrote. `files`, when set, sums that up.
// With a `batch`, those files are durable once the batch is synced
// (WriteTaskSnapshot with the same batch does it); without, before this
// returns.
absl::StatusOr<std::string> EncodeTaskSnapshot(const v1::TaskDeploymentDescriptor& tdd, const ChainSnapshot& snapshot,
                                               const std::string& checkpoint_dir, StateFilesSummary* files = nullptr,
                                               io::DurableBatch* batch = nullptr);

// Writes the encoded snapshot into `checkpoint_dir` and syncs it with
// everything else in `batch` (if any): when this returns OK, the snapshot
// and the files it refers to are durable. Returns its handle, which also
// carries `files`.
absl::StatusOr<v1::TaskStateHandle> WriteTaskSnapshot(const std::string& checkpoint_dir,
                                                      const v1::TaskDeploymentDescriptor& tdd,
                                                      const std::string& encoded, const StateFilesSummary& files = {},
                                                      io::DurableBatch* batch = nullptr);

// Reads, verifies (size, SHA-256, magic, version, the operators the handle
// names) and decodes the snapshot `handle` names in `checkpoint_dir`; each
// operator's state carries its id. kDataLoss for anything corrupt, naming
// the file and what is wrong. The keyed state's files are checked when the
// backend restores them.
absl::StatusOr<ChainSnapshot> ReadTaskSnapshot(const std::string& checkpoint_dir, const v1::TaskStateHandle& handle);

// The state of `tdd`'s chain from its restore_sources (each read with
// ReadTaskSnapshot, rescaled with RescaleChainSnapshot when it lists every
// old subtask), matched by operator id; an operator none of them holds is
// not `present`. nullopt when the task restores nothing.
absl::StatusOr<std::optional<ChainSnapshot>> ReadRestoredState(const v1::TaskDeploymentDescriptor& tdd);

// Rescaling: subtask `subtask` of `parallelism`'s share of the snapshots of
// every old subtask (in old subtask order, read with ReadTaskSnapshot): its
// part of their operator state (RedistributeOperatorState) and all their
// keyed state, from which the backend takes its key-group range.
ChainSnapshot RescaleChainSnapshot(std::vector<ChainSnapshot> old_subtasks, int subtask, int parallelism);

}  // namespace weir::taskmanager
