// ExecutionGraph: a job graph turned into parallel tasks.
//
// Vertices are chained into one task where records can pass as C++ objects:
// an edge u -> v is chained when it is forward, u and v have the same
// parallelism, u has no other downstream and v no other input. Each chain
// runs as `parallelism` tasks (subtasks). A chain's tail writes one result
// partition per outgoing edge, with one subpartition per consumer subtask.
//
// Slot sharing: subtask i of every chain runs in the job's i-th slot, so a
// job needs as many slots as its largest parallelism.
//
// Thread-safety: immutable after Build; the JobMaster guards the mutable
// task states it keeps beside it.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weir/v1/job.pb.h"

namespace weir::jobmanager {

struct Chain {
  int index = 0;
  std::vector<int> vertices;  // upstream first
  int parallelism = 1;
  std::string name;           // "KafkaSource -> Copy -> KafkaSink"
  int input_edge = -1;        // index into spec.edges(), -1 for sources
  std::vector<int> output_edges;
};

struct ExecutionGraph {
  v1::JobGraphSpec spec;
  // jobgraph::GraphFingerprint(spec), sent to the tasks instead of the spec.
  std::string spec_sha256;
  std::vector<int> vertex_parallelism;  // defaults resolved
  std::vector<int> chain_of_vertex;
  std::vector<Chain> chains;
  int slots_needed = 0;

  static absl::StatusOr<ExecutionGraph> Build(const v1::JobGraphSpec& spec, int default_parallelism);

  // "<job>/<attempt>/c<chain>s<subtask>"
  static std::string TaskId(const std::string& job_id, int attempt, int chain, int subtask);
  // "<job>/<attempt>/c<chain>s<subtask>/e<edge>"
  static std::string PartitionId(const std::string& job_id, int attempt, int chain, int subtask, int edge);

  // The parallelism a consumer sees on `edge`: forward only between equal
  // parallelism, otherwise rebalance.
  v1::Partitioning EffectivePartitioning(int edge) const;
};

}  // namespace weir::jobmanager
