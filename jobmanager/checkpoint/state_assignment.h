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

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/v1/checkpoint.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager::checkpoint {

// The handles `metadata` holds for the chain of `vertices` (upstream first),
// in subtask order; empty when it holds none. kDataLoss when they are not one
// complete set of subtasks 0..n-1 all taken at parallelism n.
absl::StatusOr<std::vector<const v1::TaskStateHandle*>> HandlesOfChain(const v1::CheckpointMetadata& metadata,
                                                                        const std::vector<int>& vertices);

// What a vertex is, as far as its state goes: "SOURCE kafka-source",
// "OPERATOR user keyed", ... Renaming an operator keeps it; putting another
// kind of operator (or connector) in its place changes it.
std::string VertexSignature(const v1::JobVertex& vertex);

// How the state of a savepoint or retained checkpoint fits a job about to
// start from it.
struct StateFit {
  // Chains whose state is dropped (--allow-non-restored-state), and why.
  std::set<std::vector<int>> dropped;
  std::vector<std::string> dropped_why;
  // "[1,2] 2 -> 3" for every chain restored at another parallelism.
  std::vector<std::string> rescaled;
};

// Every chain `metadata` holds state for must be one of `chains` (vertex
// ids, upstream first) with the same VertexSignature for each vertex (not
// checked for vertices an older metadata recorded none for); otherwise
// kFailedPrecondition saying which and what to do, unless
// `allow_non_restored`, which drops that state. kFailedPrecondition too for
// a chain some (not all) of whose subtasks finished, at another parallelism.
// kDataLoss as HandlesOfChain.
absl::StatusOr<StateFit> FitStateToGraph(const v1::CheckpointMetadata& metadata, const v1::JobGraphSpec& graph,
                                         const std::vector<std::vector<int>>& chains,
                                         const std::vector<int>& vertex_parallelism, bool allow_non_restored);

}  // namespace weir::jobmanager::checkpoint
