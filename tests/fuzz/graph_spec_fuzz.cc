// Fuzz target: a job graph as it arrives in a submission (JobGraphSpec from
// the wire) and the JobManager's validation of it, which bounds every count
// and length before anything is built from it.
#include <cstddef>
#include <cstdint>

#include "jobgraph/graph_spec.h"
#include "weir/v1/job.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weir::v1::JobGraphSpec spec;
  if (!spec.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (int max_parallelism : {1, 128, 32768}) {
    if (weir::jobgraph::ValidateGraph(spec, max_parallelism).ok()) (void)weir::jobgraph::SameGraph(spec, spec);
  }
  return 0;
}
