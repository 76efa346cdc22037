// Test job: its graph is not deterministic (a vertex is named after the
// process that builds it), so a TaskManager builds a different graph than
// the client extracted at submission. Exercises: the TaskManager refuses to
// run it, comparing the graph's fingerprint from the deployment with its own.
#include <unistd.h>

#include <string>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}, .bounded = true});
  auto copied = in.Map([](weir::kafka::Record r) { return r; }).Name("Copy-in-process-" + std::to_string(getpid()));
  weir::kafka::Sink(copied, {.brokers = brokers, .topic = args.Require("--output-topic")});
}

}  // namespace

WEIR_JOB(BuildJob)
