#include "jobmanager/checkpoint/state_assignment.h"

#include <algorithm>
#include <set>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace weir::jobmanager::checkpoint {

absl::StatusOr<std::vector<const v1::TaskStateHandle*>> HandlesOfChain(const v1::CheckpointMetadata& metadata,
                                                                        const std::vector<int>& vertices) {
  std::vector<const v1::TaskStateHandle*> handles;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    if (std::equal(handle.vertex_ids().begin(), handle.vertex_ids().end(), vertices.begin(), vertices.end())) {
      handles.push_back(&handle);
    }
  }
  std::sort(handles.begin(), handles.end(),
            [](const v1::TaskStateHandle* a, const v1::TaskStateHandle* b) {
              return a->subtask_index() < b->subtask_index();
            });
  const int n = static_cast<int>(handles.size());
  for (int i = 0; i < n; ++i) {
    if (handles[i]->subtask_index() != i || handles[i]->parallelism() != n) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", metadata.checkpoint_id(), " holds ", n, " state handles of vertices [",
          absl::StrJoin(vertices, ","), "], but handle ", i, " is of subtask ", handles[i]->subtask_index(),
          " of parallelism ", handles[i]->parallelism(), ": its metadata is inconsistent"));
    }
  }
  return handles;
}

std::string VertexSignature(const v1::JobVertex& vertex) {
  return absl::StrCat(v1::JobVertex::Kind_Name(vertex.kind()), " ",
                      vertex.connector().empty() ? "user" : vertex.connector(), vertex.keyed() ? " keyed" : "");
}

absl::StatusOr<StateFit> FitStateToGraph(const v1::CheckpointMetadata& metadata, const v1::JobGraphSpec& graph,
                                         const std::vector<std::vector<int>>& chains,
                                         const std::vector<int>& vertex_parallelism, bool allow_non_restored) {
  const std::set<std::vector<int>> known(chains.begin(), chains.end());
  std::map<int, std::string> signatures;  // this job's, by vertex id
  for (const v1::JobVertex& v : graph.vertices()) signatures[v.id()] = VertexSignature(v);
  std::set<std::vector<int>> held;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    held.emplace(handle.vertex_ids().begin(), handle.vertex_ids().end());
  }
  StateFit fit;
  for (const std::vector<int>& vertices : held) {
    std::string mismatch;
    if (!known.contains(vertices)) {
      mismatch = absl::StrCat("the savepoint holds state of vertices [", absl::StrJoin(vertices, ","),
                              "] that this job has not (chained the same way)");
    } else {
      for (int id : vertices) {
        if (id < 0 || id >= metadata.vertex_signatures_size()) continue;  // older metadata: not recorded
        if (metadata.vertex_signatures(id) != signatures[id]) {
          mismatch = absl::StrCat("the savepoint holds state of vertex ", id, " as ", metadata.vertex_signatures(id),
                                  ", but this job's vertex ", id, " is ", signatures[id],
                                  " (a savepoint of another job?)");
          break;
        }
      }
    }
    if (!mismatch.empty()) {
      if (!allow_non_restored) {
        return absl::FailedPreconditionError(
            absl::StrCat(mismatch, "; submit with --allow-non-restored-state to drop that state"));
      }
      fit.dropped.insert(vertices);
      fit.dropped_why.push_back(std::move(mismatch));
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<const v1::TaskStateHandle*> handles, HandlesOfChain(metadata, vertices));
    const int now = vertex_parallelism.at(vertices.front());
    const auto finished = std::count_if(handles.begin(), handles.end(),
                                        [](const v1::TaskStateHandle* h) { return h->finished(); });
    if (static_cast<int>(handles.size()) != now && finished > 0 && finished < static_cast<int64_t>(handles.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the savepoint records ", finished, " of the ", handles.size(), " subtasks of vertices [",
          absl::StrJoin(vertices, ","), "] as finished (their bounded input had ended); such a chain is restored "
          "only at the parallelism it had: submit it with parallelism ", handles.size()));
    }
    if (static_cast<int>(handles.size()) != now) {
      fit.rescaled.push_back(absl::StrCat("[", absl::StrJoin(vertices, ","), "] ", handles.size(), " -> ", now));
    }
  }
  return fit;
}

}  // namespace weir::jobmanager::checkpoint
