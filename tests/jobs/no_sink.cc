// Test job: a stream that ends without a sink; submission must reject it.
#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  auto in = weir::kafka::Source(env, {.brokers = "127.0.0.1:1", .topics = {"t"}});
  in.Map([](weir::kafka::Record r) { return r; }).Name("Dangling");
}

}  // namespace

WEIR_JOB(BuildJob)
