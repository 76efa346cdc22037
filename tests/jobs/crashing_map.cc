// Test job: its map crashes the process (SIGSEGV) on a record whose value is
// "poison". Exercises: a crash in user code takes down its TaskManager only;
// the job fails with that reason and the other TaskManagers keep running.
#include <csignal>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  std::string brokers = args.Require("--brokers");
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}, .bounded = true});
  auto checked = in.Map([](weir::kafka::Record r) {
    if (r.value == "poison") std::raise(SIGSEGV);
    return r;
  });
  weir::kafka::Sink(checked.Name("Crash"), {.brokers = brokers, .topic = args.Require("--output-topic")});
}

}  // namespace

WEIR_JOB(BuildJob)
