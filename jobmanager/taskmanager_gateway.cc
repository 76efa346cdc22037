#include "jobmanager/taskmanager_gateway.h"

namespace weir::jobmanager {

std::vector<absl::Status> DeployOutcomes(const absl::StatusOr<v1::DeployTasksResponse>& answer, int task_count) {
  std::vector<absl::Status> outcomes(task_count, absl::OkStatus());
  for (int k = 0; k < task_count; ++k) {
    if (!answer.ok()) {
      outcomes[k] = answer.status();
    } else if (k == answer->deployed()) {
      outcomes[k] = absl::Status(static_cast<absl::StatusCode>(answer->error_code()), answer->error());
      if (outcomes[k].ok()) outcomes[k] = absl::UnknownError("the TaskManager did not say why");
    } else if (k > answer->deployed()) {
      outcomes[k] = absl::AbortedError("not tried after an earlier task of the same call failed");
    }
  }
  return outcomes;
}

}  // namespace weir::jobmanager
