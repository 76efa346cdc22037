// State assignment: which state of a completed checkpoint (or savepoint)
// goes to which task of a new execution attempt.
//
// State is found by operator id (JobVertex.uid), not by vertex position or
// chaining: each task handle of a checkpoint lists the ids of its chain's
// operators, and a new task reads, for each of its operators, the chain of
// the checkpoint that holds that id. At the parallelism the old chain had,
// subtask i reads the handle old subtask i wrote; at another (rescaling) it
// reads every old subtask's and takes its key-group range of their keyed
// state and its share of their operator state (taskmanager/state/
// operator_state.h says how lists are split). An operator the checkpoint
// does not hold starts without state.
//
// Thread-safety: free functions and values without shared state.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "weir/v1/checkpoint.pb.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager::checkpoint {

// One chain of a checkpoint: its operators' ids and its handles.
struct CheckpointChain {
  std::vector<std::string> uids;
  // Subtask order: handle i is of subtask i, all at parallelism size().
  std::vector<const v1::TaskStateHandle*> handles;
  int finished = 0;  // handles recording a finished subtask
};

// The chains of a checkpoint, and which holds each operator. Points into
// the metadata it was built from, which must outlive it.
struct OperatorIndex {
  std::vector<CheckpointChain> chains;
  absl::flat_hash_map<std::string, int> chain_of;  // operator id -> index into chains
};

// kDataLoss when a chain's handles are not one complete set of subtasks
// 0..n-1 all taken at parallelism n, when an operator is in two chains, or
// when a handle names no operator ids.
absl::StatusOr<OperatorIndex> IndexOperators(const v1::CheckpointMetadata& metadata);

// What a vertex is, as far as its state goes: "SOURCE kafka-source",
// "OPERATOR user keyed", ... Renaming an operator keeps it; putting another
// kind of operator (or connector) in its place changes it.
std::string VertexSignature(const v1::JobVertex& vertex);

// How the state of a savepoint or retained checkpoint fits a job about to
// start from it.
struct StateFit {
  // Operators whose state is dropped (--allow-non-restored-state), and why.
  std::set<std::string> dropped;
  std::vector<std::string> dropped_why;
  // Operators of the job that start without state (new to it).
  std::vector<std::string> fresh;
  // "'Count' 2 -> 3" for every operator restored at another parallelism.
  std::vector<std::string> rescaled;
};

// Every operator `metadata` holds state for must be an operator of `graph`
// (by id) of the same VertexSignature; otherwise kFailedPrecondition naming
// it and saying what to do, unless `allow_non_restored`, which drops that
// state. kFailedPrecondition too for an operator some (not all) of whose
// subtasks finished, restored at another parallelism (`vertex_parallelism`,
// by vertex id). kDataLoss as IndexOperators.
absl::StatusOr<StateFit> FitStateToGraph(const v1::CheckpointMetadata& metadata, const v1::JobGraphSpec& graph,
                                         const std::vector<int>& vertex_parallelism, bool allow_non_restored);

}  // namespace weir::jobmanager::checkpoint
