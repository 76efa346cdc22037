// Test job: a map that never returns once it sees a record (user code that
// ignores cancellation). Exercises: a TaskManager that stops waits for it
// only task.cancellation.timeout, then exits without it.
#include <chrono>
#include <thread>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const std::string brokers = args.Require("--brokers");
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}});
  auto stuck = in.Map([](weir::kafka::Record r) {
    while (true) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return r;
  });
  weir::kafka::Sink(stuck.Name("Stuck"), {.brokers = brokers, .topic = args.Require("--output-topic")});
}

}  // namespace

WEIR_JOB(BuildJob)
