// Test job: exports the entry point with another ABI string, as a binary
// built against another Weir version would; loading must refuse it.
#include "weir/job.h"

extern "C" __attribute__((visibility("default"))) const char weir_job_abi[] =
    "weir-job-api:0 weir:0.0.1 compiler:gcc-0.0 cxx11abi:1";
extern "C" __attribute__((visibility("default"))) int weir_job_build_v1(weir::JobBuildCall*) { return 0; }
