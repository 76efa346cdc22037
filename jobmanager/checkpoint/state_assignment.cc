#include "jobmanager/checkpoint/state_assignment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

}  // namespace weir::jobmanager::checkpoint
