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

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "taskmanager/operator_chain.h"
#include "weir/v1/checkpoint.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::taskmanager {

// "v<first vertex>-s<subtask>.snapshot": stable across attempts of a job.
std::string TaskSnapshotFileName(const v1::TaskDeploymentDescriptor& tdd);

// Serializes `snapshot` (one entry per operator of tdd's chain), writing
// the asynchronous part of each operator's keyed state into
// `checkpoint_dir` first (the file then refers to what it wrote).
// `state_files_bytes`, when set, grows by the size of those files.
absl::StatusOr<std::string> EncodeTaskSnapshot(const v1::TaskDeploymentDescriptor& tdd, const ChainSnapshot& snapshot,
                                               const std::string& checkpoint_dir,
                                               int64_t* state_files_bytes = nullptr);

// Writes the encoded snapshot durably into `checkpoint_dir`; returns its
// handle, which also counts the `state_files_bytes` written beside it.
absl::StatusOr<v1::TaskStateHandle> WriteTaskSnapshot(const std::string& checkpoint_dir,
                                                      const v1::TaskDeploymentDescriptor& tdd,
                                                      const std::string& encoded, int64_t state_files_bytes = 0);

// Reads, verifies (size, SHA-256, magic, version, that it belongs to this
// job and chain) and decodes the snapshot `handle` names in `checkpoint_dir`.
// kDataLoss for anything corrupt, naming the file and what is wrong. The
// keyed state's files are checked when the backend restores them.
absl::StatusOr<ChainSnapshot> ReadTaskSnapshot(const std::string& checkpoint_dir, const v1::TaskStateHandle& handle,
                                               const v1::TaskDeploymentDescriptor& tdd);

// Rescaling: subtask `subtask` of `parallelism`'s share of the snapshots of
// every old subtask (in old subtask order, read with ReadTaskSnapshot): its
// part of their operator state (RedistributeOperatorState) and all their
// keyed state, from which the backend takes its key-group range.
ChainSnapshot RescaleChainSnapshot(std::vector<ChainSnapshot> old_subtasks, int subtask, int parallelism);

}  // namespace weir::taskmanager
