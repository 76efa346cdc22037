// State assignment: which state handles of a completed checkpoint (or
// savepoint) go to which task of a new execution attempt.
//
// At the parallelism the checkpoint was taken at, subtask i gets the handle
// old subtask i wrote. At another parallelism (rescaling) every new subtask
// gets the handles of all old subtasks of its chain; the TaskManager takes
// its key-group range of their keyed state and its share of their operator
// state (taskmanager/state/operator_state.h says how lists are split).
//
// Thread-safety: free functions without shared state.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "weir/v1/checkpoint.pb.h"

namespace weir::jobmanager::checkpoint {

// The handles `metadata` holds for the chain of `vertices` (upstream first),
// in subtask order; empty when it holds none. kDataLoss when they are not one
// complete set of subtasks 0..n-1 all taken at parallelism n.
absl::StatusOr<std::vector<const v1::TaskStateHandle*>> HandlesOfChain(const v1::CheckpointMetadata& metadata,
                                                                        const std::vector<int>& vertices);

}  // namespace weir::jobmanager::checkpoint
