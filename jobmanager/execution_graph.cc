#include "jobmanager/execution_graph.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "jobgraph/graph_spec.h"

namespace weir::jobmanager {

absl::StatusOr<ExecutionGraph> ExecutionGraph::Build(const v1::JobGraphSpec& spec, int default_parallelism) {
  ExecutionGraph g;
  g.spec = spec;
  g.spec_sha256 = jobgraph::GraphFingerprint(spec);
  const int n = spec.vertices_size();
  g.vertex_parallelism.resize(n);
  for (int i = 0; i < n; ++i) {
    int p = spec.vertices(i).parallelism();
    g.vertex_parallelism[i] = p > 0 ? p : default_parallelism;
    g.slots_needed = std::max(g.slots_needed, g.vertex_parallelism[i]);
  }
  std::vector<std::vector<int>> out_edges(n), in_edges(n);
  for (int e = 0; e < spec.edges_size(); ++e) {
    out_edges[spec.edges(e).source()].push_back(e);
    in_edges[spec.edges(e).target()].push_back(e);
  }
  auto chainable = [&](int e) {
    const v1::JobEdge& edge = spec.edges(e);
    // A side output goes through the network: the operator's main output
    // is what a chain passes on.
    return edge.partitioning() == v1::FORWARD && edge.side_output() == 0 && out_edges[edge.source()].size() == 1 &&
           in_edges[edge.target()].size() == 1 &&
           g.vertex_parallelism[edge.source()] == g.vertex_parallelism[edge.target()];
  };
  g.chain_of_vertex.assign(n, -1);
  // Vertices are in topological order of creation by the API, but do not rely
  // on it: start chains at every vertex whose input is not chainable.
  for (int v = 0; v < n; ++v) {
    bool head = in_edges[v].empty() || !chainable(in_edges[v][0]);
    if (!head) continue;
    Chain chain;
    chain.index = static_cast<int>(g.chains.size());
    chain.parallelism = g.vertex_parallelism[v];
    chain.input_edge = in_edges[v].empty() ? -1 : in_edges[v][0];
    int cur = v;
    while (true) {
      chain.vertices.push_back(cur);
      g.chain_of_vertex[cur] = chain.index;
      if (out_edges[cur].size() == 1 && chainable(out_edges[cur][0])) {
        cur = spec.edges(out_edges[cur][0]).target();
      } else {
        chain.output_edges = out_edges[cur];
        break;
      }
    }
    std::vector<std::string> names;
    for (int u : chain.vertices) names.push_back(spec.vertices(u).name());
    chain.name = absl::StrJoin(names, " -> ");
    g.chains.push_back(std::move(chain));
  }
  for (int v = 0; v < n; ++v) {
    if (g.chain_of_vertex[v] < 0) return absl::InvalidArgumentError("job graph has an unreachable cycle");
  }
  return g;
}

std::string ExecutionGraph::TaskId(const std::string& job_id, int attempt, int chain, int subtask) {
  return absl::StrCat(job_id, "/", attempt, "/c", chain, "s", subtask);
}

std::string ExecutionGraph::PartitionId(const std::string& job_id, int attempt, int chain, int subtask, int edge) {
  return absl::StrCat(TaskId(job_id, attempt, chain, subtask), "/e", edge);
}

v1::Partitioning ExecutionGraph::EffectivePartitioning(int edge) const {
  const v1::JobEdge& e = spec.edges(edge);
  if (e.partitioning() == v1::FORWARD && vertex_parallelism[e.source()] != vertex_parallelism[e.target()]) {
    return v1::REBALANCE;
  }
  return e.partitioning();
}

}  // namespace weir::jobmanager
