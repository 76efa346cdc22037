#include "jobmanager/checkpoint/state_assignment.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace weir::jobmanager::checkpoint {

absl::StatusOr<OperatorIndex> IndexOperators(const v1::CheckpointMetadata& metadata) {
  OperatorIndex index;
  std::map<std::vector<std::string>, int> chain_by_uids;
  for (const v1::TaskStateHandle& handle : metadata.tasks()) {
    if (handle.operator_uids_size() == 0) {
      return absl::DataLossError(absl::StrCat("checkpoint ", metadata.checkpoint_id(), " holds a state handle of "
                                              "vertices [", absl::StrJoin(handle.vertex_ids(), ","),
                                              "] without operator ids; it cannot be restored by this Weir"));
    }
    std::vector<std::string> uids(handle.operator_uids().begin(), handle.operator_uids().end());
    auto [it, inserted] = chain_by_uids.emplace(uids, static_cast<int>(index.chains.size()));
    if (inserted) index.chains.push_back({uids, {}, 0});
    CheckpointChain& chain = index.chains[it->second];
    chain.handles.push_back(&handle);
    if (handle.finished()) ++chain.finished;
  }
  for (size_t c = 0; c < index.chains.size(); ++c) {
    CheckpointChain& chain = index.chains[c];
    std::sort(chain.handles.begin(), chain.handles.end(),
              [](const v1::TaskStateHandle* a, const v1::TaskStateHandle* b) {
                return a->subtask_index() < b->subtask_index();
              });
    const int n = static_cast<int>(chain.handles.size());
    for (int i = 0; i < n; ++i) {
      if (chain.handles[i]->subtask_index() != i || chain.handles[i]->parallelism() != n) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint ", metadata.checkpoint_id(), " holds ", n, " state handles of operators [",
            absl::StrJoin(chain.uids, ", "), "], but handle ", i, " is of subtask ", chain.handles[i]->subtask_index(),
            " of parallelism ", chain.handles[i]->parallelism(), ": its metadata is inconsistent"));
      }
    }
    for (const std::string& uid : chain.uids) {
      if (!index.chain_of.emplace(uid, static_cast<int>(c)).second) {
        return absl::DataLossError(absl::StrCat("checkpoint ", metadata.checkpoint_id(), " holds the operator '", uid,
                                                "' in two chains: its metadata is inconsistent"));
      }
    }
  }
  return index;
}

std::string VertexSignature(const v1::JobVertex& vertex) {
  return absl::StrCat(v1::JobVertex::Kind_Name(vertex.kind()), " ",
                      vertex.connector().empty() ? "user" : vertex.connector(), vertex.keyed() ? " keyed" : "");
}

absl::StatusOr<StateFit> FitStateToGraph(const v1::CheckpointMetadata& metadata, const v1::JobGraphSpec& graph,
                                         const std::vector<int>& vertex_parallelism, bool allow_non_restored) {
  ASSIGN_OR_RETURN(OperatorIndex index, IndexOperators(metadata));
  std::map<std::string, const v1::JobVertex*> by_uid;  // this job's operators
  for (const v1::JobVertex& v : graph.vertices()) by_uid[v.uid()] = &v;
  StateFit fit;
  for (const CheckpointChain& chain : index.chains) {
    const int old_parallelism = static_cast<int>(chain.handles.size());
    for (const std::string& uid : chain.uids) {
      auto it = by_uid.find(uid);
      std::string mismatch;
      if (it == by_uid.end()) {
        mismatch = absl::StrCat("the savepoint holds state of the operator '", uid, "', which this job has not (no "
                                "operator with that id: DataStream::Uid, or its name)");
      } else if (auto sig = metadata.operator_signatures().find(uid);
                 sig != metadata.operator_signatures().end() && sig->second != VertexSignature(*it->second)) {
        mismatch = absl::StrCat("the savepoint holds state of the operator '", uid, "' as ", sig->second,
                                ", but this job's operator '", uid, "' is ", VertexSignature(*it->second),
                                " (a savepoint of another job, or an id given to another operator?)");
      }
      if (!mismatch.empty()) {
        if (!allow_non_restored) {
          return absl::FailedPreconditionError(
              absl::StrCat(mismatch, "; submit with --allow-non-restored-state to drop that state"));
        }
        fit.dropped.insert(uid);
        fit.dropped_why.push_back(std::move(mismatch));
        continue;
      }
      const int now = vertex_parallelism.at(it->second->id());
      if (now == old_parallelism) continue;
      if (chain.finished > 0 && chain.finished < old_parallelism) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the savepoint records ", chain.finished, " of the ", old_parallelism, " subtasks of the operator '", uid,
            "' as finished (their bounded input had ended); it is restored only at the parallelism it had: "
            "give it parallelism ", old_parallelism));
      }
      fit.rescaled.push_back(absl::StrCat("'", uid, "' ", old_parallelism, " -> ", now));
    }
  }
  for (const v1::JobVertex& v : graph.vertices()) {
    if (!index.chain_of.contains(v.uid())) fit.fresh.push_back(v.uid());
  }
  return fit;
}

}  // namespace weir::jobmanager::checkpoint
