// The wire form of a job graph (v1::JobGraphSpec) and its validation.
//
// The client extracts the spec from a job binary and the JobManager checks
// it before scheduling anything; every TaskManager rebuilds the graph from
// the same binary and arguments and checks that it gives the same spec.
#pragma once

#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "weir/job_graph.h"
#include "weir/v1/job.pb.h"

namespace weir::jobgraph {

v1::JobGraphSpec ToSpec(const JobGraph& graph);

// Structure: vertex ids are 0..n-1 in order; edges join existing vertices;
// sources have no input and every other vertex exactly one; every vertex
// without a downstream is a sink and sinks have none; there is at least one
// source and one sink; no cycles; parallelism is 0 (default) or 1..max.
absl::Status ValidateGraph(const v1::JobGraphSpec& spec, int max_parallelism);

// Whether `pred` holds for a vertex upstream of `from` (its inputs, theirs,
// and so on; not `from` itself). `upstream[v]` lists the sources of v's
// input edges.
bool AnyUpstream(const std::vector<std::vector<int>>& upstream, int from, absl::FunctionRef<bool(int)> pred);

// Whether two specs describe the same graph (deterministic serialization).
bool SameGraph(const v1::JobGraphSpec& a, const v1::JobGraphSpec& b);

// SHA-256 (hex) of the graph's deterministic serialization: equal for two
// specs exactly when SameGraph holds (barring a hash collision).
std::string GraphFingerprint(const v1::JobGraphSpec& spec);

}  // namespace weir::jobgraph
