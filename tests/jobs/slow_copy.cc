// Test job: kafka_copy of a bounded input, exactly-once, with a map that
// takes --sleep-us per record. With an input whose partitions differ in
// size, one subtask reaches the end of its input long before the other:
// exercises the final checkpoint (the early one must not commit before
// the job's last checkpoint, or a later failure would replay what it
// committed).
#include <chrono>
#include <string>
#include <thread>

#include "weir/job.h"

namespace {

void BuildJob(weir::StreamEnvironment& env, const weir::JobArgs& args) {
  const std::string brokers = args.Require("--brokers");
  const int sleep_us = std::stoi(args.Get("--sleep-us", "1000"));
  auto in = weir::kafka::Source(env, {.brokers = brokers, .topics = {args.Require("--input-topic")}, .bounded = true});
  auto slow = in.Map([sleep_us](weir::kafka::Record r) {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    r.partition = -1;
    return r;
  });
  weir::kafka::Sink(slow.Name("Slow"), {.brokers = brokers,
                                        .topic = args.Require("--output-topic"),
                                        .guarantee = weir::kafka::Guarantee::kExactlyOnce});
}

}  // namespace

WEIR_JOB(BuildJob)
